"""Download, extract, convert and validate one registry dataset into ``data/<name>/``."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from zsdr.data import registry
from zsdr.data.formats import BeirCounts, validate_beir, write_manifest
from zsdr.files import file_digest
from zsdr.io import DataError, file_lock, temp_sibling

log = logging.getLogger("zsdr.fetch")


def download_all(name: str, downloads: str | Path, mirror: str | None = None, extras: bool = True,
                 retries: int = 5, timeout: float = 60, progress: bool = True,
                 mirror_setting: str = "`mirror:` in the config") -> list[Path]:
    """Download the files of dataset ``name`` (and its training extras) under ``downloads/<host>/<path>``."""
    from zsdr.data.download import download

    ds = registry.get(name)
    paths = []
    for f in (*ds.files, *(ds.extras if extras else ())):
        dest = Path(downloads) / f.local_path
        paths.append(download(f.url, dest, **f.checks(), checksum_from=f.checksum_source, mirror=mirror,
                              retries=retries, timeout=timeout, progress=progress, mirror_setting=mirror_setting))
    return paths


def convert_downloaded(name: str, downloads: str | Path, out: str | Path, byo: str | Path = "byo",
                       dataset: registry.Dataset | None = None) -> BeirCounts:
    """Turn the downloaded archive(s) of ``name`` — or its local BEIR-layout folder (a bring-your-own dataset,
    config `datasets.local`) — into a validated BEIR folder at ``out`` (one process at a time per output:
    ``<out>.lock``). ``dataset``: the dataset as the config defines it (default: the registry's)."""
    out = Path(out)
    with file_lock(out, what=f"the conversion of {name}"):
        return _convert_locked(dataset or registry.get(name), downloads, out, byo)


def convert_configured(out: str | Path, downloads: str | Path, byo: str | Path,
                       local: dict | None = None) -> BeirCounts:
    """A `convert` job: the dataset its output folder ``out`` names (data/<name>), as the config defines it — its
    `datasets.local` entry ``local`` (a local folder or a new dataset), else the registry's — from its downloads
    under ``downloads`` or its local folder (:func:`convert_downloaded`)."""
    out = Path(out)
    dataset = registry.config_dataset(out.name, dict(local)) if local else None
    return convert_downloaded(out.name, downloads, out, byo=byo, dataset=dataset)


def local_digests(ds: registry.Dataset, folder: Path) -> dict[str, str]:
    """``{file relative to the folder: sha256}`` of the files a local copy of ``ds`` is read from; a DataError
    when the folder holds no corpus, or when a file's sha256 differs from the one the registry (or config
    `datasets.local.<name>.sha256`) gives for it."""
    files = registry.local_files(folder)
    if not files:
        raise registry.missing_local(ds, folder)
    digests = {p.relative_to(folder).as_posix(): file_digest(p) for p in files}
    for rel, expected in sorted(ds.sha256.items()):
        got = digests.get(rel)
        if got is None:
            raise DataError(folder / rel, None, f"missing: dataset {ds.name!r} has a known sha256 for it",
                            f"copy the file {rel} of {ds.name} into {folder}")
        if got != expected.lower():
            raise DataError(folder / rel, None, f"sha256 {got}, but {ds.name}'s {rel} has sha256 {expected}: not the "
                            "same data", f"replace it with the published file, or give the dataset another name "
                            "under config datasets.local")
    return digests


def _convert_locked(ds: registry.Dataset, downloads: str | Path, out: Path, byo: str | Path) -> BeirCounts:
    from zsdr.data.convert import CONVERTERS

    name = ds.name
    folder = ds.folder(byo)
    digests = None
    if folder is not None:
        digests = local_digests(ds, folder)
        validate_beir(folder)
        counts = CONVERTERS["beir"](folder.parent, out, subdir=folder.name)
    else:
        missing = [f.local_path for f in ds.files if not (Path(downloads) / f.local_path).is_file()]
        if missing:
            raise DataError(Path(downloads) / missing[0], None, "download missing",
                            f"run `zsdr fetch {name}` or `snakemake data/{name}/dataset.json`")
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        scratch = temp_sibling(out, is_dir=True, kind="raw")
        try:
            from zsdr.data.archives import extract
            from zsdr.data.download import verify_recorded

            for f in ds.files:
                verify_recorded(Path(downloads) / f.local_path)   # damaged since it was downloaded: refuse
                extract(Path(downloads) / f.local_path, scratch / Path(f.local_path).name.split(".")[0], strip=f.strip)
            raw = _single_root(scratch)
            log.info("converting %s with the %s converter", name, ds.converter)
            counts = CONVERTERS[ds.converter](raw, out, **ds.options)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    missing_splits = [s for s in ds.splits if not (out / "qrels" / f"{s}.tsv").is_file()]
    if ds.group == "local" and missing_splits:
        raise DataError(out / "qrels" / f"{missing_splits[0]}.tsv", None,
                        f"dataset {name!r} declares the split {missing_splits[0]!r} but has no qrels for it",
                        f"add qrels/{missing_splits[0]}.tsv, or list only its splits in config "
                        f"datasets.local.{name}.splits")
    info = {"sources": [f.url for f in ds.files]}
    if digests is not None:
        # what the folder held when it was converted: the marker of a local copy names its files by content
        info = {"sources": [str(folder)], "files_sha256": digests}
    write_manifest(out, counts, name=ds.name, group=ds.group, description=ds.description, language=ds.language,
                   license=ds.license, used_by=list(ds.used_by), splits=list(ds.splits), **info)
    return counts


def _single_root(scratch: Path) -> Path:
    """With one archive, converters see its extracted folder; with several, the folder holding them all."""
    children = [p for p in scratch.iterdir()]
    return children[0] if len(children) == 1 else scratch


def fetch(name: str, downloads: str | Path = "downloads", data: str | Path = "data", byo: str | Path = "byo",
          mirror: str | None = None, extras: bool = True, progress: bool = True, retries: int = 5,
          timeout: float = 60) -> BeirCounts:
    """``zsdr fetch NAME``: download (unless bring-your-own), convert and validate."""
    ds = registry.get(name)
    if ds.folder(byo) is None:
        download_all(name, downloads, mirror=mirror, extras=extras, progress=progress, retries=retries,
                     timeout=timeout, mirror_setting="`--mirror`")
    return convert_downloaded(name, downloads, Path(data) / name, byo=byo)

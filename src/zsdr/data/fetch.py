"""Download, extract, convert and validate one registry dataset into ``data/<name>/``."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from zsdr.data import registry
from zsdr.data.formats import BeirCounts, validate_beir, write_manifest
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


def convert_downloaded(name: str, downloads: str | Path, out: str | Path, byo: str | Path = "byo") -> BeirCounts:
    """Turn the downloaded archive(s) of ``name`` into a validated BEIR folder at ``out``
    (one process at a time per output: ``<out>.lock``)."""
    out = Path(out)
    with file_lock(out, what=f"the conversion of {name}"):
        return _convert_locked(name, downloads, out, byo)


def _convert_locked(name: str, downloads: str | Path, out: Path, byo: str | Path) -> BeirCounts:
    from zsdr.data.convert import CONVERTERS

    ds = registry.get(name)
    if ds.byo is not None:
        src = Path(byo) / name
        if not (src / "corpus.jsonl").is_file() and not (src / "corpus.jsonl.gz").is_file():
            raise DataError(src / "corpus.jsonl", None, f"dataset {name!r} is not public and was not provided", ds.byo)
        validate_beir(src)
        counts = CONVERTERS["beir"](src.parent, out, subdir=src.name)
    else:
        missing = [f.local_path for f in ds.files if not (Path(downloads) / f.local_path).is_file()]
        if missing:
            raise DataError(Path(downloads) / missing[0], None, "download missing",
                            f"run `zsdr fetch {name}` or `snakemake data/{name}/dataset.json`")
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        scratch = temp_sibling(out, is_dir=True, kind="raw")
        try:
            from zsdr.data.download import extract, verify_recorded

            for f in ds.files:
                verify_recorded(Path(downloads) / f.local_path)   # damaged since it was downloaded: refuse
                extract(Path(downloads) / f.local_path, scratch / Path(f.local_path).name.split(".")[0], strip=f.strip)
            raw = _single_root(scratch)
            log.info("converting %s with the %s converter", name, ds.converter)
            counts = CONVERTERS[ds.converter](raw, out, **ds.options)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    write_manifest(out, counts, name=ds.name, group=ds.group, description=ds.description, language=ds.language,
                   license=ds.license, used_by=list(ds.used_by), sources=[f.url for f in ds.files])
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
    if ds.byo is None:
        download_all(name, downloads, mirror=mirror, extras=extras, progress=progress, retries=retries,
                     timeout=timeout, mirror_setting="`--mirror`")
    return convert_downloaded(name, downloads, Path(data) / name, byo=byo)

"""Every dataset the five papers use: where it comes from, how it is checked, how it is converted.

One :class:`Dataset` per BEIR-layout folder ``data/<name>/``. A dataset is either downloaded
(``files``: URL, published checksum where one exists, approximate size), extracted and converted
by a converter of :mod:`zsdr.data.convert`, or — for the four BEIR sets that are not public —
"bring your own files": the user places a BEIR-layout folder under ``byo/<name>/`` and the
pipeline validates and adopts it. Sources: docs/methods/datasets.md#sources; BEIR's
README for the md5 of every public archive.

Downloaded files land under ``downloads/<host>/<path>`` — the layout ``wget -x`` writes — so a
``downloads/`` folder is itself a mirror that another site can point ``mirror:`` at.

Checksums: where a source publishes none (MS MARCO's archives, LoTTE), the md5 comes from the
download metadata of the installed ``ir_datasets`` package (``ir_datasets/etc/downloads.json``,
read at run time, nothing imported), which lists the md5 and size of every file it downloads by
URL. A registry md5 (BEIR's README) and ir_datasets' md5 of the same URL must agree (a test checks
it); :meth:`RemoteFile.checks` is what a download verifies.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import urlsplit

log = logging.getLogger("zsdr.registry")

BEIR_BASE = "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets"
MSMARCO_BASE = "https://msmarco.z22.web.core.windows.net/msmarcoranking"
# the hub repository at a fixed revision (its commit, as the hub's file pages name it), not `main`, which moves
HF_HARD_NEGATIVES_REVISION = "dfc8eb1792185a3fe157a7394c084b71f2ab74de"
HF_HARD_NEGATIVES = ("https://huggingface.co/datasets/sentence-transformers/msmarco-hard-negatives/resolve/"
                     + HF_HARD_NEGATIVES_REVISION)
HUB_NO_SHA256 = ("pinned to the hub revision; the hub's sha256 of the file is not recorded here (not sourced): "
                 "verified against the sha256 recorded at its first download")
# GitHub archives by commit (a branch archive changes with every push): the newest commit of each repository
MULTI_CPR_COMMIT = "a4e467182a3e2c110528a1575d79b33cc449d2c3"   # Alibaba-NLP/Multi-CPR, 2023-01-04
CMEDQA2_COMMIT = "85feb9278c3ae552c591205cbf3e828368c91f8f"     # zhangsheng93/cMedQA2, 2019-01-09
GITHUB_NO_CHECKSUM = ("pinned to a commit; GitHub builds the archive on request and publishes no checksum of it: "
                      "verified against the sha256 recorded at its first download")
LOTTE_URL = "https://downloads.cs.stanford.edu/nlp/data/colbert/colbertv2/lotte.tar.gz"
BEIR_LICENSE_NOTE = "see the original dataset's licence (BEIR redistributes it as is)"


@dataclass(frozen=True)
class RemoteFile:
    url: str
    md5: str | None = None
    sha256: str | None = None
    size: int | None = None           # bytes, when known (approximate sizes go in Dataset.size)
    note: str = ""
    strip: int = 0                    # leading archive path components to drop (GitHub archives: 1)

    @property
    def local_path(self) -> str:
        """Path under ``downloads/``: ``<host>/<path>`` (the ``wget -x`` mirror layout)."""
        parts = urlsplit(self.url)
        path = parts.path.lstrip("/")
        if parts.query:  # e.g. Google Drive ids
            path = f"{path}_{parts.query.replace('&', '_').replace('=', '-')}"
        return f"{parts.netloc}/{path}"

    @property
    def ir_datasets_entry(self) -> IrDatasetsDownload | None:
        """What the installed ir_datasets knows of this URL (None: nothing, or it is not installed)."""
        return ir_datasets_downloads().get(self.url)

    def checks(self) -> dict:
        """What a download of this file verifies: ``{"md5", "sha256", "size"}`` (None where unknown), the
        md5 the registry gives, else the one ir_datasets records for the same URL."""
        md5 = self.md5
        if md5 is None and self.ir_datasets_entry is not None:
            md5 = self.ir_datasets_entry.md5
        return {"md5": md5, "sha256": self.sha256, "size": self.size}

    @property
    def size_bytes(self) -> tuple[int | None, str]:
        """``(bytes, where the number comes from)`` of the file: the registry's exact size, else the size hint
        of the installed ir_datasets for the same URL; ``(None, "unknown")`` otherwise."""
        if self.size is not None:
            return self.size, "the registry"
        entry = self.ir_datasets_entry
        if entry is not None and entry.size_hint is not None:
            return entry.size_hint, f"ir_datasets {entry.version} size hint"
        return None, "unknown"

    @property
    def checksum_source(self) -> str | None:
        """Where :meth:`checks`' checksum comes from, for messages; None when the file is unverified."""
        if self.md5 or self.sha256:
            return "the registry (zsdr.data.registry)"
        entry = self.ir_datasets_entry
        if entry is not None:
            return f"ir_datasets {entry.version} ({entry.key})"
        return None

    def as_spec(self) -> dict:
        spec = {"url": self.url, **self.checks(), "checksum_from": self.checksum_source}
        return {k: v for k, v in spec.items() if v is not None}


@dataclass(frozen=True)
class IrDatasetsDownload:
    """One file of ir_datasets' download metadata: its md5, its size as ir_datasets hints it (used for
    progress there, not verified here) and the entry that lists it."""

    md5: str
    size_hint: int | None
    key: str
    version: str


def _ir_datasets_file() -> tuple[Path, str] | None:
    """ir_datasets' ``etc/downloads.json`` and the package's version, found without importing it."""
    try:
        spec = importlib.util.find_spec("ir_datasets")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "etc" / "downloads.json"
    if not path.is_file():
        return None
    from importlib import metadata

    try:
        version = metadata.version("ir_datasets")
    except metadata.PackageNotFoundError:
        version = "(unknown version)"
    return path, version


@functools.cache
def ir_datasets_downloads() -> dict[str, IrDatasetsDownload]:
    """{url: :class:`IrDatasetsDownload`} of every file the installed ir_datasets lists with an md5 (a URL
    listed twice with different md5s is left out: neither can be trusted); {} without ir_datasets."""
    found = _ir_datasets_file()
    if found is None:
        log.warning("ir_datasets is not installed: MS MARCO's and LoTTE's archives download unverified "
                    "(fix: `make install`, which installs it with ranx)")
        return {}
    path, version = found
    out: dict[str, IrDatasetsDownload] = {}
    conflicting: set[str] = set()

    def walk(node, key: tuple[str, ...]) -> None:
        if isinstance(node, dict):
            url, md5 = node.get("url"), node.get("expected_md5")
            if isinstance(url, str) and isinstance(md5, str):
                size = node.get("size_hint")
                entry = IrDatasetsDownload(md5.lower(), size if isinstance(size, int) else None, ".".join(key), version)
                if url in out and out[url].md5 != entry.md5:
                    conflicting.add(url)
                out.setdefault(url, entry)
            for k, v in node.items():
                if isinstance(v, (dict, list)):
                    walk(v, (*key, str(k)))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, (*key, str(i)))

    walk(json.loads(path.read_text(encoding="utf-8")), ())
    return {url: entry for url, entry in out.items() if url not in conflicting}


@dataclass(frozen=True)
class Dataset:
    name: str
    group: str
    description: str
    files: tuple[RemoteFile, ...] = ()
    converter: str | None = None
    options: dict = field(default_factory=dict)
    splits: tuple[str, ...] = ("test",)
    license: str = BEIR_LICENSE_NOTE
    size: str = ""
    language: str = "en"
    used_by: tuple[str, ...] = ()
    byo: str | None = None             # bring-your-own instructions (non-public data)
    extras: tuple[RemoteFile, ...] = ()  # training-side files downloaded with the dataset
    # sha256 of the BEIR-layout files a local copy of the dataset must have ({"corpus.jsonl": ...}): a local
    # folder (config `datasets.local`, a bring-your-own folder) whose file differs is refused
    sha256: dict = field(default_factory=dict)
    local: str | None = None           # a local BEIR-layout folder the dataset is read from (config `datasets.local`)

    @property
    def public(self) -> bool:
        return self.byo is None and bool(self.files)

    @property
    def download_size(self) -> str:
        """The size of what ``zsdr fetch`` downloads for it (its files, and its training-side extras): from the
        sources' byte counts where every file has one (:attr:`RemoteFile.size_bytes`), else the registry's
        approximate ``size`` text."""
        sizes = [f.size_bytes[0] for f in self.files]
        if not sizes or None in sizes:
            return self.size or "-"
        shown = human_bytes(sum(sizes))
        extra = [f.size_bytes[0] for f in self.extras]
        if extra and None not in extra:
            shown += f" (+{human_bytes(sum(extra))} training files)"
        elif extra:
            shown += " (+ training files)"
        return shown

    def folder(self, byo: str | Path = "byo") -> Path | None:
        """The local BEIR-layout folder this dataset is read from: its `datasets.local` folder, else, for a
        bring-your-own dataset, ``<byo>/<name>``; None for a dataset converted from its downloads."""
        if self.local is not None:
            return Path(self.local).expanduser()
        return Path(byo) / self.name if self.byo is not None else None

    def missing_fix(self, folder: Path) -> str:
        """How to provide a local folder that is not there (the same words at planning and at run time)."""
        if self.byo is not None and self.local is None:
            return self.byo
        how = "or remove its `path` to download it" if self.files else "or give its `url` and checksum"
        return f"place corpus.jsonl, queries.jsonl and qrels/<split>.tsv there (config datasets.local.{self.name}.path), {how}"


def human_bytes(n: float) -> str:
    """A byte count for people: ``5.3 GB``, ``142 MB``, ``2.8 MB`` (decimal units)."""
    for unit in ("bytes", "KB", "MB", "GB"):
        if n < 1000:
            return f"{n:.0f} {unit}" if unit == "bytes" or n >= 100 else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


BEIR_NAMES = ("corpus.jsonl", "queries.jsonl")


def local_files(folder: str | Path) -> list[Path]:
    """The files of a BEIR-layout folder a conversion reads: corpus and queries (``.jsonl`` or ``.jsonl.gz``)
    and every ``qrels/*.tsv``, sorted; [] when the folder holds no corpus."""
    folder = Path(folder)
    out = []
    for name in BEIR_NAMES:
        for candidate in (folder / name, folder / f"{name}.gz"):
            if candidate.is_file():
                out.append(candidate)
                break
    if not out or not out[0].name.startswith("corpus"):
        return []
    qrels = folder / "qrels"
    out += sorted(qrels.glob("*.tsv")) if qrels.is_dir() else []
    return out


def missing_local(ds: Dataset, folder: str | Path):
    """The DataError of a local folder that holds no corpus: what the dry run and the conversion both say."""
    from zsdr.io import DataError

    what = "is not public and was not provided" if ds.byo is not None and ds.local is None else "has no local copy"
    return DataError(Path(folder) / "corpus.jsonl", None, f"dataset {ds.name!r} {what}", ds.missing_fix(Path(folder)))


def config_dataset(name: str, spec: dict) -> Dataset:
    """A dataset of config `datasets.local`: a registry dataset read from a local folder, or a new dataset in BEIR
    layout (a local folder, or a zip archive at `url` with its checksum), with its language and splits."""
    base = REGISTRY.get(name)
    folder = spec.get("path")
    if base is not None:
        known = dict(base.sha256)
        known.update(spec.get("sha256") or {})
        return replace(base, local=folder, sha256=known,
                       **{k: (tuple(spec[k]) if k == "splits" else spec[k])
                          for k in ("language", "splits", "description") if spec.get(k) is not None})
    files: tuple[RemoteFile, ...] = ()
    if spec.get("url"):
        files = (RemoteFile(spec["url"], md5=spec.get("md5"), sha256=spec.get("archive_sha256")),)
    return Dataset(
        name=name, group="local", description=spec.get("description") or f"{name} (config datasets.local)",
        files=files, converter="beir", options={"subdir": spec.get("subdir") or name},
        splits=tuple(spec.get("splits") or ("test",)), license=spec.get("license") or "see the source's licence",
        language=spec.get("language") or "en", sha256=dict(spec.get("sha256") or {}), local=folder)




def _beir(name: str, md5: str, splits: tuple[str, ...], size: str, used_by: tuple[str, ...], license: str,
          description: str, subdir: str | None = None, dataset_name: str | None = None) -> Dataset:
    return Dataset(
        name=dataset_name or name, group="beir", description=description,
        files=(RemoteFile(f"{BEIR_BASE}/{name}.zip", md5=md5),), converter="beir",
        options={"subdir": subdir or name}, splits=splits, license=license, size=size, used_by=used_by)


_ALL_EN = ("BERM", "MoDIR", "COCO-DR", "RMSC")
CQA_FORUMS = ("android", "english", "gaming", "gis", "mathematica", "physics", "programmers", "stats", "tex",
              "unix", "webmasters", "wordpress")

DATASETS: list[Dataset] = [
    Dataset(
        name="msmarco", group="msmarco", description="MS MARCO passage ranking: 8.8M passages, train and dev-small",
        files=(RemoteFile(f"{MSMARCO_BASE}/collectionandqueries.tar.gz",
                          note="no checksum published by MS MARCO (the md5 is ir_datasets'); also mirrored as BEIR "
                               "msmarco.zip (md5 444067daf65d982533ea17ebd59501e4)"),),
        converter="msmarco", splits=("train", "dev"), size="1.0 GB (2.9 GB extracted)",
        license="MS MARCO terms: non-commercial research use", used_by=("BERM", "DDR", "MoDIR", "COCO-DR", "RMSC"),
        extras=(
            RemoteFile(f"{MSMARCO_BASE}/triples.train.small.tar.gz",
                       note="query, positive, BM25 negative text triples (the md5 is ir_datasets')"),
            RemoteFile(f"{HF_HARD_NEGATIVES}/msmarco-hard-negatives.jsonl.gz",
                       note=f"negatives of 13 systems (DDR); {HUB_NO_SHA256}"),
            RemoteFile(f"{HF_HARD_NEGATIVES}/cross-encoder-ms-marco-MiniLM-L-6-v2-scores.pkl.gz",
                       note=f"teacher scores for Margin-MSE; {HUB_NO_SHA256}"),
        )),
    _beir("trec-covid", "ce62140cb23feb9becf6270d0d1fe6d1", ("test",), "69 MB", _ALL_EN,
          "CORD-19 abstracts; see the TREC-COVID terms", "TREC-COVID (BEIR): 171K CORD-19 abstracts, 50 topics"),
    Dataset(name="trec-covid-beir", group="beir", description="TREC-COVID with Thakur et al.'s fuller annotation (DDR's variant)",
            files=(RemoteFile(f"{BEIR_BASE}/trec-covid-beir.zip", note="no published checksum"),), converter="beir",
            options={"subdir": "trec-covid-beir"}, splits=("test",), size="70 MB", used_by=("DDR", "COCO-DR"),
            license="CORD-19 terms"),
    _beir("nfcorpus", "a89dba18a62ef92f7d323ec890a0d38d", ("train", "dev", "test"), "2.4 MB", _ALL_EN,
          "NFCorpus: non-commercial research use", "NFCorpus: nutrition and medical documents"),
    _beir("nq", "d4d3d2e48787a744b6f6e691ff534307", ("test",), "489 MB", _ALL_EN, "CC BY-SA 3.0",
          "Natural Questions over Wikipedia (2.68M passages)"),
    _beir("hotpotqa", "f412724f78b0d91183a0e86805e16114", ("train", "dev", "test"), "624 MB", _ALL_EN, "CC BY-SA 4.0",
          "HotpotQA multi-hop questions over Wikipedia"),
    _beir("fiqa", "17918ed23cd04fb15047f73e6c3bd9d9", ("train", "dev", "test"), "17 MB", _ALL_EN,
          "non-commercial research use", "FiQA-2018 financial opinion QA"),
    _beir("arguana", "8ad3e3c2a5867cdced806d6503f29b99", ("test",), "3 MB", _ALL_EN, "CC BY 4.0",
          "ArguAna counter-argument retrieval (query ids may equal doc ids)"),
    _beir("webis-touche2020", "46f650ba5a527fc69e0a6521c5a23563", ("test",), "226 MB", _ALL_EN, "CC BY 4.0",
          "Touché-2020 argument retrieval"),
    *[_beir("cqadupstack", "4e41456d7df8ee7760a7f866133bda78", ("test",), "5.3 GB (all forums)", _ALL_EN,
            "Apache 2.0", f"CQADupStack {forum} forum (duplicate questions)", subdir=f"cqadupstack/{forum}",
            dataset_name=f"cqadupstack-{forum}") for forum in CQA_FORUMS],
    _beir("quora", "18fb154900ba42a600f84b839c173167", ("dev", "test"), "15 MB", _ALL_EN,
          "Quora terms (non-commercial)", "Quora duplicate questions (query ids may equal doc ids)"),
    _beir("dbpedia-entity", "c2a39eb420a3164af735795df012ac2c", ("dev", "test"), "653 MB", _ALL_EN, "CC BY-SA 3.0",
          "DBpedia-Entity v2 entity retrieval"),
    _beir("scidocs", "38121350fc3a4d2f48850f6aff52e4a9", ("test",), "142 MB", _ALL_EN, "CC BY 4.0",
          "SCIDOCS citation prediction"),
    _beir("fever", "5a818580227bfb4b35bb6fa46d9b6c03", ("train", "dev", "test"), "1.2 GB", _ALL_EN, "CC BY-SA 3.0",
          "FEVER fact checking over Wikipedia"),
    _beir("climate-fever", "8b66f0a9126c521bae2bde127b4dc99d", ("test",), "1.2 GB", _ALL_EN, "CC BY-SA 3.0",
          "Climate-FEVER fact checking over Wikipedia"),
    replace(_beir("scifact", "5f7d1de60b170fc8027bb7898e2efca1", ("train", "test"), "2.8 MB", _ALL_EN,
                  "CC BY-NC 2.0", "SciFact scientific claim verification"),
            # the files of BEIR's scifact.zip (its corpus.jsonl is BEIR's; the qrels and test queries equal
            # Anserini's beir-v1.0.0-scifact topics and qrels): what a local copy must hold
            sha256={"corpus.jsonl": "dec31c8182f3d744c7d2c09423756fd1d17cbef75808db13ba01cc0aab4d1ac6",
                    "queries.jsonl": "8ff84a7c903f722981cd8d595c022660140c51867b27608a6d4910db86080313",
                    "qrels/test.tsv": "0864bb985e0ca2367ba217977e72004d549054b2b06666ed9d4825ac7c21284c",
                    "qrels/train.tsv": "a53f2114831916c096b6c37d9e54da68cef4efdcdbd5ed46533601af972acf1d"}),
    *[Dataset(name=name, group="beir-byo", description=desc, splits=("test",), used_by=used,
              license="not redistributable (see the source's licence)",
              byo=(f"{name} is not public. Build it in BEIR layout with BEIR's reproduction scripts ({how}) and place "
                   f"corpus.jsonl, queries.jsonl and qrels/test.tsv under byo/{name}/; the pipeline validates and "
                   f"adopts it as data/{name}/."))
      for name, desc, used, how in [
          ("bioasq", "BioASQ (BEIR build, 14.9M abstracts)", ("MoDIR", "COCO-DR"),
           "https://github.com/beir-cellar/beir/blob/main/examples/dataset#2-bioasq; needs a bioasq.org account"),
          ("signal1m", "Signal-1M (RT) news-tweet retrieval", ("COCO-DR",),
           "https://github.com/beir-cellar/beir/blob/main/examples/dataset#4-signal-1m; needs the Signal-1M licence"),
          ("trec-news", "TREC-NEWS (Washington Post v2)", ("COCO-DR",),
           "https://github.com/beir-cellar/beir/blob/main/examples/dataset#1-trec-news; needs the NIST WaPo licence"),
          ("robust04", "Robust04 (TREC disks 4 and 5)", ("COCO-DR",),
           "https://github.com/beir-cellar/beir/blob/main/examples/dataset#3-robust04; needs the NIST disks 4&5 licence"),
      ]],
    *[Dataset(name=f"lotte-{topic}-{split}", group="lotte",
              description=f"LoTTE {topic} ({split} split): forum and search queries",
              files=(RemoteFile(LOTTE_URL, note="no checksum published by ColBERT (the md5 is ir_datasets')"),),
              converter="lotte",
              options={"topic": topic, "split": split}, splits=("forum", "search"), size="3.6 GB (archive, all topics)",
              license="see the StackExchange data licence (CC BY-SA)", used_by=("DDR", "RMSC"))
      for topic in ("writing", "recreation", "science", "technology", "lifestyle") for split in ("test", "dev")],
    Dataset(name="oagqa", group="oagqa", description="OAG-QA: 17,948 academic questions over 87 topics (BERM Table 2)",
            files=(RemoteFile("https://drive.google.com/uc?export=download&id=1jEAzWq_J0cXz1pvT9nQ2s2ooGdcR8r6-",
                              note="Google Drive asks to confirm large downloads: fetch by hand or via a mirror"),),
            converter="oagqa", options={}, splits=("test",), size="~1 GB", license="ODC-BY (Open Academic Graph)",
            used_by=("BERM",)),
    *[Dataset(name=f"cpr-{domain}", group="multi-cpr", language="zh",
              description=f"Multi-CPR {domain} passage retrieval (evaluated on dev)",
              files=(RemoteFile(f"https://github.com/Alibaba-NLP/Multi-CPR/archive/{MULTI_CPR_COMMIT}.zip",
                                note=GITHUB_NO_CHECKSUM, strip=1),),
              converter="cpr", options={"domain": domain}, splits=("train", "dev"), size="~1 GB",
              license="Apache 2.0", used_by=("DDR",)) for domain in ("ecom", "video", "medical")],
    Dataset(name="cmedqa2", group="cmedqa2", language="zh", description="cMedQAv2 Chinese medical QA (evaluated on test)",
            files=(RemoteFile(f"https://github.com/zhangsheng93/cMedQA2/archive/{CMEDQA2_COMMIT}.zip",
                              note=GITHUB_NO_CHECKSUM, strip=1),),
            converter="cmedqa2", splits=("train", "dev", "test"), size="~100 MB", license="research use (see repository)",
            used_by=("DDR",)),
    Dataset(name="dureader", group="dureader", language="zh",
            description="DuReader 2.0 turned into retrieval as DDR does (Chinese source domain)",
            files=(RemoteFile("https://dataset-bj.cdn.bcebos.com/dureader/dureader_preprocessed.zip",
                              note="no published checksum"),),
            converter="dureader", splits=("train", "dev"), size="~1.2 GB",
            license="Apache 2.0 (DuReader)", used_by=("DDR",)),
]

REGISTRY: dict[str, Dataset] = {d.name: d for d in DATASETS}


def get(name: str) -> Dataset:
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown dataset {name!r}; known: {', '.join(sorted(REGISTRY))}") from None


def remote_files() -> dict[str, RemoteFile]:
    """Every downloadable file of the registry keyed by its path under ``downloads/``."""
    out: dict[str, RemoteFile] = {}
    for d in DATASETS:
        for f in (*d.files, *d.extras):
            out[f.local_path] = f
    return out

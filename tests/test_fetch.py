"""The registry and `zsdr fetch`: download through a mirror, verify, extract, convert, validate."""

import dataclasses
import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from zsdr.data import registry
from zsdr.data.convert import CONVERTERS
from zsdr.data.fetch import fetch
from zsdr.io import DataError

from .test_formats import make_dataset

ROOT = Path(__file__).resolve().parents[1]


def test_registry_is_complete_and_consistent():
    names = set(registry.REGISTRY)
    beir_public = {"trec-covid", "nfcorpus", "nq", "hotpotqa", "fiqa", "arguana", "webis-touche2020", "quora",
                   "dbpedia-entity", "scidocs", "fever", "climate-fever", "scifact"}
    assert beir_public <= names
    assert {f"cqadupstack-{f}" for f in ("android", "gaming", "wordpress")} <= names
    assert len([n for n in names if n.startswith("cqadupstack-")]) == 12
    assert {"bioasq", "signal1m", "trec-news", "robust04"} <= names
    assert {f"lotte-{t}-{s}" for t in ("writing", "recreation", "science", "technology", "lifestyle")
            for s in ("test", "dev")} <= names
    assert {"msmarco", "trec-covid-beir", "oagqa", "cpr-ecom", "cpr-video", "cpr-medical", "cmedqa2",
            "dureader"} <= names
    for d in registry.DATASETS:
        assert d.license and d.description and d.used_by, d.name
        if d.byo:
            assert f"byo/{d.name}/" in d.byo and not d.files
        else:
            assert d.converter in CONVERTERS, d.name
            assert all(f.url.startswith("https://") for f in d.files)
        if d.group == "beir":
            assert d.files[0].md5 or "no published checksum" in d.files[0].note, d.name
    assert registry.get("scifact").files[0].md5 == "5f7d1de60b170fc8027bb7898e2efca1"
    msmarco = registry.get("msmarco")
    assert {Path(f.url).name for f in msmarco.extras} == {
        "triples.train.small.tar.gz", "msmarco-hard-negatives.jsonl.gz",
        "cross-encoder-ms-marco-MiniLM-L-6-v2-scores.pkl.gz"}
    with pytest.raises(KeyError, match="unknown dataset"):
        registry.get("nope")


def _beir_zip(tmp_path: Path, name: str) -> Path:
    src = make_dataset(tmp_path / "src" / name)
    archive = tmp_path / f"{name}.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for p in sorted(src.rglob("*")):
            zf.write(p, p.relative_to(src.parent).as_posix())
    return archive


def _mirror_with(tmp_path: Path, archive: Path, remote: registry.RemoteFile) -> Path:
    mirror = tmp_path / "mirror"
    dest = mirror / remote.local_path
    dest.parent.mkdir(parents=True)
    dest.write_bytes(archive.read_bytes())
    return mirror


def test_fetch_through_a_file_mirror(tmp_path, monkeypatch):
    archive = _beir_zip(tmp_path, "scifact")
    real = registry.get("scifact")
    md5 = hashlib.md5(archive.read_bytes()).hexdigest()
    local = dataclasses.replace(real, files=(dataclasses.replace(real.files[0], md5=md5),))
    monkeypatch.setitem(registry.REGISTRY, "scifact", local)
    mirror = _mirror_with(tmp_path, archive, local.files[0])
    counts = fetch("scifact", downloads=tmp_path / "downloads", data=tmp_path / "data",
                   mirror=mirror.as_uri(), progress=False)
    assert counts.docs == 3 and counts.qrels == {"test": 3}
    manifest = json.loads((tmp_path / "data" / "scifact" / "dataset.json").read_text())
    assert manifest["docs"] == 3 and manifest["sources"] == [real.files[0].url]
    assert (tmp_path / "downloads" / local.files[0].local_path).is_file()
    # nothing but the dataset is left in data/ (no scratch folders)
    assert [p.name for p in (tmp_path / "data").iterdir()] == ["scifact"]


def test_fetch_checksum_mismatch_leaves_nothing(tmp_path):
    """A mirror copy that is not BEIR's published archive fails the md5 check."""
    archive = _beir_zip(tmp_path, "scifact")
    mirror = _mirror_with(tmp_path, archive, registry.get("scifact").files[0])
    with pytest.raises(DataError, match="(?i)md5|checksum"):
        fetch("scifact", downloads=tmp_path / "downloads", data=tmp_path / "data", mirror=str(mirror),
              progress=False)
    assert not (tmp_path / "data" / "scifact").exists()
    leftovers = [p for p in (tmp_path / "downloads").rglob("*") if p.is_file()] if (tmp_path / "downloads").exists() else []
    assert leftovers == []


def test_bring_your_own_dataset(tmp_path):
    with pytest.raises(DataError) as info:
        fetch("robust04", downloads=tmp_path / "downloads", data=tmp_path / "data", byo=tmp_path / "byo")
    assert "byo/robust04/" in str(info.value) and "not public" in str(info.value)
    assert not (tmp_path / "data" / "robust04").exists()
    make_dataset(tmp_path / "byo" / "robust04")
    counts = fetch("robust04", downloads=tmp_path / "downloads", data=tmp_path / "data", byo=tmp_path / "byo")
    assert counts.docs == 3 and (tmp_path / "data" / "robust04" / "dataset.json").is_file()


def test_cli_fetch_unknown_and_datasets_listing():
    bad = subprocess.run([sys.executable, "-m", "zsdr", "fetch", "no-such-set"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown dataset 'no-such-set'" in bad.stderr
    listing = subprocess.run([sys.executable, "-m", "zsdr", "datasets"], capture_output=True, text=True, check=True)
    assert "scifact" in listing.stdout and "5f7d1de60b170fc8027bb7898e2efca1" in listing.stdout

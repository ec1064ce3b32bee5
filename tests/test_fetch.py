"""The registry and `zsdr fetch`: download through a mirror, verify, extract, convert, validate."""

import dataclasses
import hashlib
import json
import re
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
    rows = {line.split()[0]: line for line in listing.stdout.splitlines()}
    # where each checksum comes from: BEIR's README (the registry), ir_datasets' metadata, or none published
    assert rows["scifact"].endswith("[checksum: the registry (zsdr.data.registry)]")
    assert re.search(r"\[checksum: ir_datasets \S+ \(msmarco-passage\.collectionandqueries\)\]$", rows["msmarco"])
    assert rows["dureader"].endswith("[checksum: none published; the sha256 of the first download is recorded]")
    # sizes from the sources: ir_datasets' size hints where the registry has no byte count
    assert " 5.3 GB " in rows["cqadupstack-android"] and " 142 MB " in rows["scidocs"]


def test_no_dataset_source_follows_a_moving_branch():
    # a branch archive or a hub file at `main` changes under a finished run: every source is a fixed file, a
    # commit's archive or a hub revision
    moving = re.compile(r"/refs/heads/|/archive/(main|master)\.|/resolve/main/|/raw/(main|master)/")
    files = registry.remote_files()
    assert not [f.url for f in files.values() if moving.search(f.url)]
    assert any("/archive/a4e467182a3e2c110528a1575d79b33cc449d2c3.zip" in url for url in (f.url for f in files.values()))
    for f in files.values():
        if f.md5 is None and f.sha256 is None and f.ir_datasets_entry is None:
            assert "recorded at its first download" in f.note or "no published checksum" in f.note or \
                "Google Drive" in f.note, f"{f.url}: an unverified source must say how it is checked ({f.note!r})"


def test_sizes_come_from_the_sources():
    cqa = registry.get("cqadupstack-android").files[0]
    assert cqa.size_bytes == (5343728040, f"ir_datasets {cqa.ir_datasets_entry.version} size hint")
    assert registry.get("msmarco").extras[0].size_bytes[0] == 7930881353      # the triples, 7.93 GB
    assert registry.get("dureader").files[0].size_bytes == (None, "unknown")
    assert registry.get("dureader").download_size == "~1.2 GB"                  # the registry's approximation
    assert registry.human_bytes(142471588) == "142 MB" and registry.human_bytes(2816079) == "2.8 MB"


class _SlowHandler(__import__("http.server").server.BaseHTTPRequestHandler):
    """Serves ``server.files`` (path -> bytes) in small pieces with pauses, so downloads overlap."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        import time

        body = self.server.files.get(self.path.split("?")[0])
        self.server.requests.append((self.path, self.headers.get("Range")))
        if body is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        start = int(self.headers["Range"].removeprefix("bytes=").split("-")[0]) if self.headers.get("Range") else 0
        self.send_response(206 if start else 200)
        self.send_header("Content-Length", str(len(body) - start))
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        self.end_headers()
        for i in range(start, len(body), 4096):
            self.wfile.write(body[i:i + 4096])
            self.wfile.flush()
            time.sleep(self.server.pause)


def test_two_concurrent_fetches_of_one_file_give_one_correct_archive(tmp_path):
    """Two `zsdr fetch` of a source without a published checksum, started while the first is mid-download:
    the second waits for the first's lock and reuses its verified archive; both convert the same data."""
    import threading
    import time
    from http.server import ThreadingHTTPServer

    name = "trec-covid-beir"
    remote = registry.get(name).files[0]
    assert not (remote.md5 or remote.sha256)
    src = make_dataset(tmp_path / "src" / name)
    with open(src / "corpus.jsonl", "a", encoding="utf-8") as fh:   # a few hundred KB, served slowly
        for i in range(400):
            fh.write(json.dumps({"_id": f"x{i}", "title": "", "text": f"filler {i} " * 60}) + "\n")
    archive = tmp_path / f"{name}.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED) as zf:
        for p in sorted(src.rglob("*")):
            zf.write(p, p.relative_to(src.parent).as_posix())
    payload = archive.read_bytes()
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _SlowHandler)
    srv.daemon_threads = True
    srv.files = {"/" + remote.local_path: payload}   # the mirror layout <host>/<path>
    srv.requests, srv.pause = [], 4.0 * 4096 / len(payload)   # ~4 s: the second starts well before the end
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        mirror = f"http://127.0.0.1:{srv.server_address[1]}"
        cmd = [sys.executable, "-m", "zsdr", "fetch", name, "--mirror", mirror, "--quiet",
               "--downloads", str(tmp_path / "downloads"), "--data", str(tmp_path / "data")]
        first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not srv.requests and time.monotonic() < deadline and first.poll() is None:
            time.sleep(0.02)
        assert srv.requests, "the first fetch never reached the server"
        second = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        outs = [p.communicate(timeout=120) for p in (first, second)]
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=5)
    assert [first.returncode, second.returncode] == [0, 0], outs
    assert "waiting for pid" in outs[1][1]  # the second saw the first's lock
    local = tmp_path / "downloads" / remote.local_path
    assert local.read_bytes() == payload
    assert local.with_name(local.name + ".sha256").read_text().split()[0] == hashlib.sha256(payload).hexdigest()
    assert [r for r in srv.requests if r[1] is None] == [srv.requests[0]]  # one full download, no resumed overlap
    assert sorted(p.name for p in local.parent.iterdir()) == [local.name, local.name + ".sha256"]
    assert json.loads(outs[0][0])["docs"] == json.loads(outs[1][0])["docs"] == 403
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == [name]


def test_convert_refuses_a_download_damaged_after_it_was_verified(tmp_path, monkeypatch):
    from zsdr.data.fetch import convert_downloaded

    archive = _beir_zip(tmp_path, "scifact")
    real = registry.get("scifact")
    local = dataclasses.replace(real, files=(dataclasses.replace(
        real.files[0], md5=hashlib.md5(archive.read_bytes()).hexdigest()),))
    monkeypatch.setitem(registry.REGISTRY, "scifact", local)
    mirror = _mirror_with(tmp_path, archive, local.files[0])
    fetch("scifact", downloads=tmp_path / "downloads", data=tmp_path / "data", mirror=mirror.as_uri(), progress=False)
    downloaded = tmp_path / "downloads" / local.files[0].local_path
    with open(downloaded, "ab") as fh:
        fh.write(b"appended later")
    with pytest.raises(DataError, match="the file changed since it was downloaded"):
        convert_downloaded("scifact", tmp_path / "downloads", tmp_path / "data" / "scifact")
    assert (tmp_path / "data" / "scifact" / "dataset.json").is_file()  # the earlier conversion is untouched


def test_a_second_fetch_verifies_an_unchecked_archive_against_its_recorded_sha256(tmp_path):
    """A source without a published checksum: the archive damaged after the first `zsdr fetch` is not kept
    as "already present" by the second; it is downloaded again (the sha256 sidecar tells)."""
    name = "trec-covid-beir"
    remote = registry.get(name).files[0]
    archive = _beir_zip(tmp_path, name)
    mirror = _mirror_with(tmp_path, archive, remote)
    cmd = [sys.executable, "-m", "zsdr", "fetch", name, "--mirror", str(mirror), "--quiet",
           "--downloads", str(tmp_path / "downloads"), "--data", str(tmp_path / "data")]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    local = tmp_path / "downloads" / remote.local_path
    with open(local, "ab") as fh:
        fh.write(b"bytes appended after the download")
    second = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    assert "fails its check (sha256 recorded when it was downloaded" in second.stderr
    assert local.read_bytes() == archive.read_bytes()


# ------------------------------------------------------------------ checksums from ir_datasets

# Sources no checksum covers: neither their publisher nor ir_datasets lists one (a branch archive cannot
# have one); each is checked against the sha256 recorded at its first download.
UNVERIFIED = {
    f"{registry.BEIR_BASE}/trec-covid-beir.zip",
    f"{registry.HF_HARD_NEGATIVES}/msmarco-hard-negatives.jsonl.gz",
    f"{registry.HF_HARD_NEGATIVES}/cross-encoder-ms-marco-MiniLM-L-6-v2-scores.pkl.gz",
    "https://drive.google.com/uc?export=download&id=1jEAzWq_J0cXz1pvT9nQ2s2ooGdcR8r6-",
    f"https://github.com/Alibaba-NLP/Multi-CPR/archive/{registry.MULTI_CPR_COMMIT}.zip",
    f"https://github.com/zhangsheng93/cMedQA2/archive/{registry.CMEDQA2_COMMIT}.zip",
    "https://dataset-bj.cdn.bcebos.com/dureader/dureader_preprocessed.zip",
}


@pytest.fixture
def irds_cache():
    registry.ir_datasets_downloads.cache_clear()
    yield
    registry.ir_datasets_downloads.cache_clear()


def _downloads_json() -> dict:
    """ir_datasets' package data, read here without the registry's code (an independent reading)."""
    import importlib.util

    folder = Path(importlib.util.find_spec("ir_datasets").origin).parent
    return json.loads((folder / "etc" / "downloads.json").read_text(encoding="utf-8"))


def test_every_source_ir_datasets_knows_gets_its_checksum():
    from zsdr.models.released import remote_files as released_files

    irds = _downloads_json()
    known = {irds["msmarco-passage"]["collectionandqueries"]["url"]: irds["msmarco-passage"]["collectionandqueries"],
             irds["msmarco-passage"]["train/docpairs/small"]["url"]: irds["msmarco-passage"]["train/docpairs/small"],
             irds["lotte"]["source"]["url"]: irds["lotte"]["source"],
             **{e["url"]: e for name, e in irds["beir"].items() if isinstance(e, dict) and "url" in e}}
    files = {f.url: f for f in [*registry.remote_files().values(), *released_files().values()]}
    covered = {url for url, f in files.items() if f.ir_datasets_entry is not None}
    assert covered == set(files) & set(known) and len(covered) == 17, sorted(covered)  # 14 BEIR, 2 MS MARCO, LoTTE
    for url in covered:
        f = files[url]
        assert f.checks()["md5"] == known[url]["expected_md5"], url
        assert f.md5 in (None, known[url]["expected_md5"]), f"{url}: the registry's md5 disagrees with ir_datasets'"
        spec = f.as_spec()
        assert spec["md5"] == known[url]["expected_md5"] and spec["checksum_from"], spec
    msmarco = registry.get("msmarco")
    assert msmarco.files[0].checks()["md5"] == "31644046b18952c1386cd4564ba2ae69"   # ir_datasets 0.6.3
    assert msmarco.files[0].checksum_source.startswith("ir_datasets ")
    assert "msmarco-passage.collectionandqueries" in msmarco.files[0].checksum_source
    assert registry.get("lotte-science-test").files[0].checks()["md5"] == "3b2e88b1d66933627462950b4c3f5d0f"
    unverified = {url for url, f in files.items() if not any(f.checks().values())}
    released = {f.url for f in released_files().values()}
    assert unverified - released == UNVERIFIED


def test_a_file_that_fails_ir_datasets_checksum_is_one_line(tmp_path, capsys):
    from .test_reliability import the_error_line, zsdr

    remote = registry.get("msmarco").files[0]
    mirror = tmp_path / "mirror"
    (mirror / remote.local_path).parent.mkdir(parents=True)
    (mirror / remote.local_path).write_bytes(b"not MS MARCO")
    code, out, err = zsdr(capsys, "fetch", "msmarco", "--no-extras", "--quiet", "--mirror", mirror,
                          "--downloads", tmp_path / "downloads", "--data", tmp_path / "data")
    line = the_error_line(err)
    assert code == 1 and out == ""
    assert line.startswith(f"zsdr fetch: error: {remote.url}: downloaded file (mirror copy ") and "(fix: " in line
    assert "md5: expected 31644046b18952c1386cd4564ba2ae69, got " in line, line
    assert "expected checksum from ir_datasets" in line and "msmarco-passage.collectionandqueries" in line
    assert not [p for p in (tmp_path / "downloads").rglob("*") if p.is_file()]


def test_the_download_rule_verifies_what_the_registry_expects(tmp_path, monkeypatch):
    """The rule's spec (as_spec, in its params) carries the md5 and its origin to the download; a copy
    with that md5 passes."""
    from zsdr.data.download import fetch_file

    payload = b"an archive ir_datasets knows"
    url = "https://example.org/data/archive.tar.gz"
    entry = registry.IrDatasetsDownload(hashlib.md5(payload).hexdigest(), len(payload), "example.archive", "9.9")
    monkeypatch.setattr(registry, "ir_datasets_downloads", lambda: {url: entry})
    spec = registry.RemoteFile(url).as_spec()
    assert spec == {"url": url, "md5": entry.md5, "checksum_from": "ir_datasets 9.9 (example.archive)"}
    mirror = tmp_path / "mirror" / "example.org" / "data"
    mirror.mkdir(parents=True)
    (mirror / "archive.tar.gz").write_bytes(payload)
    got = fetch_file(spec, tmp_path / "out", mirror=str(tmp_path / "mirror"), progress=False)
    assert got.read_bytes() == payload
    (mirror / "archive.tar.gz").write_bytes(payload[::-1])
    with pytest.raises(DataError, match=r"md5: expected [0-9a-f]{32}, got .*expected checksum from ir_datasets 9\.9"):
        fetch_file(spec, tmp_path / "again", mirror=str(tmp_path / "mirror"), progress=False)


def test_without_ir_datasets_the_gaps_stay_unverified_with_a_warning(monkeypatch, caplog, irds_cache):
    monkeypatch.setattr(registry, "_ir_datasets_file", lambda: None)
    with caplog.at_level("WARNING", logger="zsdr.registry"):
        assert registry.ir_datasets_downloads() == {}
    assert "ir_datasets is not installed" in caplog.text
    assert registry.get("msmarco").files[0].checks()["md5"] is None
    assert registry.get("scifact").files[0].checks()["md5"] == "5f7d1de60b170fc8027bb7898e2efca1"  # BEIR's own


def test_a_url_ir_datasets_lists_with_two_md5s_is_left_out(tmp_path, monkeypatch, irds_cache):
    data = {"a": {"x": {"url": "https://h/f", "expected_md5": "0" * 32},
                  "y": {"url": "https://h/f", "expected_md5": "1" * 32}},
            "b": [{"url": "https://h/g", "expected_md5": "A" * 32, "size_hint": 3}]}
    (tmp_path / "downloads.json").write_text(json.dumps(data))
    monkeypatch.setattr(registry, "_ir_datasets_file", lambda: (tmp_path / "downloads.json", "0.0"))
    assert registry.ir_datasets_downloads() == {"https://h/g": registry.IrDatasetsDownload("a" * 32, 3, "b.0", "0.0")}

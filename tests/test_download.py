"""Downloads (local HTTP server on 127.0.0.1, file:// and mirror folders) and safe extraction."""

import hashlib
import io
import logging
import socket
import tarfile
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests
import urllib3

from zsdr.data import archives
from zsdr.data import download as dl
from zsdr.data.archives import DownloadError, extract
from zsdr.data.download import download, fetch_file, resolve_url
from zsdr.io import DataError

PAYLOAD = bytes(range(256)) * 800  # 204,800 bytes


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # keep pytest output quiet
        pass

    def do_GET(self):
        srv = self.server
        srv.requests.append((self.path, dict(self.headers)))
        if srv.fail_first > 0:
            srv.fail_first -= 1
            return self._reply(500, b"boom")
        path = srv.root / self.path.lstrip("/").split("?")[0]
        if srv.force_404 or not path.is_file():
            return self._reply(404, b"not found")
        body = path.read_bytes()
        start, code = 0, 200
        rng = self.headers.get("Range")
        if rng and not srv.ignore_range:
            start = int(rng.removeprefix("bytes=").split("-")[0])
            if start >= len(body):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(body)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            code = 206
        self.send_response(code)
        self.send_header("Content-Length", str(len(body) - start))
        if code == 206:
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        self.end_headers()
        if srv.drop_first > 0:  # send half the body, then hang up
            srv.drop_first -= 1
            self.wfile.write(body[start:start + (len(body) - start) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.wfile.write(body[start:])

    def _reply(self, code, body):
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def server(tmp_path, monkeypatch):
    """A Range-capable HTTP server on 127.0.0.1 serving ``tmp_path/www``; switches on ``srv``."""
    monkeypatch.setattr(dl, "BACKOFF_BASE", 0.001)
    root = tmp_path / "www"
    (root / "data").mkdir(parents=True)
    (root / "data" / "file.bin").write_bytes(PAYLOAD)
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.daemon_threads = True
    srv.root, srv.requests = root, []
    srv.fail_first = srv.drop_first = 0
    srv.force_404 = srv.ignore_range = False
    srv.base = f"http://127.0.0.1:{srv.server_address[1]}"
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join(timeout=5)


def _md5(data):
    return hashlib.md5(data).hexdigest()


def _sha(data):
    return hashlib.sha256(data).hexdigest()


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*")) if folder.exists() else []


# ------------------------------------------------------------------------------------------ download

def test_plain_download_verified(server, tmp_path):
    dest = tmp_path / "out" / "file.bin"
    got = download(f"{server.base}/data/file.bin", dest, md5=_md5(PAYLOAD), sha256=_sha(PAYLOAD),
                   size=len(PAYLOAD), progress=False, timeout=5)
    assert got == dest and dest.read_bytes() == PAYLOAD
    assert _files(dest.parent) == [dest, dest.with_name("file.bin.sha256")]
    assert dest.with_name("file.bin.sha256").read_text() == f"{_sha(PAYLOAD)}  file.bin\n"


def test_retries_on_500(server, tmp_path):
    server.fail_first = 2
    dest = download(f"{server.base}/data/file.bin", tmp_path / "f.bin", md5=_md5(PAYLOAD), progress=False,
                    timeout=5)
    assert dest.read_bytes() == PAYLOAD and len(server.requests) == 3


def test_resume_after_dropped_connection(server, tmp_path):
    server.drop_first = 1
    dest = download(f"{server.base}/data/file.bin", tmp_path / "f.bin", sha256=_sha(PAYLOAD), progress=False,
                    timeout=5)
    assert dest.read_bytes() == PAYLOAD
    assert len(server.requests) == 2
    assert "Range" not in server.requests[0][1]
    assert server.requests[1][1]["Range"] == f"bytes={len(PAYLOAD) // 2}-"
    assert not (tmp_path / "f.bin.part").exists()


def test_resume_from_existing_part_and_200_restart(server, tmp_path):
    dest = tmp_path / "f.bin"
    (tmp_path / "f.bin.part").write_bytes(PAYLOAD[:1000])
    download(f"{server.base}/data/file.bin", dest, md5=_md5(PAYLOAD), progress=False, timeout=5)
    assert dest.read_bytes() == PAYLOAD and server.requests[0][1]["Range"] == "bytes=1000-"
    # a server that ignores Range answers 200: the .part is restarted from zero
    dest.unlink()
    (tmp_path / "f.bin.part").write_bytes(b"garbage that is not a prefix")
    server.ignore_range = True
    download(f"{server.base}/data/file.bin", dest, md5=_md5(PAYLOAD), progress=False, timeout=5)
    assert dest.read_bytes() == PAYLOAD


def test_checksum_mismatch_leaves_nothing(server, tmp_path):
    dest = tmp_path / "out" / "f.bin"
    with pytest.raises(DownloadError, match="md5: expected 0+, got " + _md5(PAYLOAD)) as info:
        download(f"{server.base}/data/file.bin", dest, md5="0" * 32, progress=False, timeout=5)
    assert isinstance(info.value, DataError) and "checksum" in str(info.value)
    assert _files(tmp_path / "out") == []
    with pytest.raises(DownloadError, match="size: expected 5 bytes"):
        download(f"{server.base}/data/file.bin", dest, size=5, progress=False, timeout=5)
    assert _files(tmp_path / "out") == []


def test_existing_good_dest_is_not_fetched_again(server, tmp_path):
    dest = tmp_path / "f.bin"
    dest.write_bytes(PAYLOAD)
    assert download(f"{server.base}/data/file.bin", dest, md5=_md5(PAYLOAD), progress=False) == dest
    assert server.requests == []
    dest.write_bytes(b"stale copy")  # wrong checksum: downloaded again
    download(f"{server.base}/data/file.bin", dest, md5=_md5(PAYLOAD), progress=False, timeout=5)
    assert dest.read_bytes() == PAYLOAD and len(server.requests) == 1


def test_404_names_the_url(server, tmp_path):
    url = f"{server.base}/data/missing.bin"
    with pytest.raises(DownloadError) as info:
        download(url, tmp_path / "m.bin", progress=False, timeout=5)
    text = str(info.value)
    assert url in text and "404" in text and "mirror:" in text and str(tmp_path / "m.bin") in text
    assert len(server.requests) == 1  # a 404 is not retried
    assert _files(tmp_path / "m.bin.part") == [] and not (tmp_path / "m.bin").exists()


def test_unreachable_host_after_retries(tmp_path, monkeypatch):
    monkeypatch.setattr(dl, "BACKOFF_BASE", 0.001)
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/x.bin"
    with pytest.raises(DownloadError, match="after 3 attempts") as info:
        download(url, tmp_path / "x.bin", retries=2, progress=False, timeout=2)
    assert url in str(info.value) and "by hand" in str(info.value)


def test_a_host_that_does_not_resolve_fails_at_once(tmp_path, monkeypatch):
    # offline: the name service cannot resolve the host; retrying for minutes brings no network back
    slept = []
    monkeypatch.setattr(dl.time, "sleep", slept.append)
    tries = []

    def no_dns(self, url, **kwargs):
        tries.append(url)
        try:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        except socket.gaierror as exc:
            raise requests.ConnectionError(f"Failed to resolve {url}") from exc

    monkeypatch.setattr(requests.Session, "get", no_dns)
    url = "https://datasets.example.org/x.zip"
    with pytest.raises(DownloadError, match=r"host name 'datasets.example.org' does not resolve .*not retried") as info:
        download(url, tmp_path / "x.zip", retries=5, progress=False, mirror_setting="`--mirror`")
    assert tries == [url] and slept == []
    assert "set `--mirror` to a folder holding datasets.example.org/x.zip" in str(info.value)
    assert not list(tmp_path.iterdir())
    # the chain as urllib3 builds it: the error's reason holds the name-resolution error
    inner = urllib3.exceptions.NameResolutionError("datasets.example.org", None, socket.gaierror(-2, "no"))
    wrapped = requests.ConnectionError(urllib3.exceptions.MaxRetryError(None, url, reason=inner))
    assert dl._unresolvable_host(wrapped) and not dl._unresolvable_host(requests.ConnectionError("refused"))


def test_progress_lines_in_a_log(server, tmp_path, caplog):
    # not a terminal (a job's log): a line every 5 % instead of a bar that leaves nothing
    with caplog.at_level(logging.INFO, logger="zsdr.download"):
        download(f"{server.base}/data/file.bin", tmp_path / "f.bin", progress=True, timeout=5, chunk_size=1000)
    lines = [r.message for r in caplog.records if r.message.startswith("f.bin: ")]
    assert 15 <= len(lines) <= 20, lines
    assert lines[-1].startswith(f"f.bin: {archives.human_bytes(len(PAYLOAD))} of {archives.human_bytes(len(PAYLOAD))} (100%)")
    percents = [int(line.split("(")[1].split("%")[0]) for line in lines]
    assert percents == sorted(percents) and percents[0] <= 10
    # no size from the server: every 250 MB
    clock = iter(range(100))
    unknown = dl.ProgressLines("big.bin", None, clock=lambda: next(clock))
    with caplog.at_level(logging.INFO, logger="zsdr.download"):
        caplog.clear()
        for got in range(0, 800 * 10**6, 10**6):
            unknown.update(got)
    assert [r.message.split(",")[0] for r in caplog.records] == ["big.bin: 250.0 MB", "big.bin: 500.0 MB",
                                                                      "big.bin: 750.0 MB"]


def test_file_url_plain_path_and_mirror_folder(tmp_path):
    src = tmp_path / "src.bin"
    src.write_bytes(PAYLOAD)
    a = download(src.as_uri(), tmp_path / "a" / "a.bin", md5=_md5(PAYLOAD), progress=False)
    b = download(str(src), tmp_path / "b" / "b.bin", sha256=_sha(PAYLOAD), progress=False)
    assert a.read_bytes() == b.read_bytes() == PAYLOAD
    # a mirror folder in the `wget -x` layout: <mirror>/<host>/<path>
    url = "https://example.org/datasets/v1/file.bin"
    mirror = tmp_path / "mirror"
    (mirror / "example.org" / "datasets" / "v1").mkdir(parents=True)
    (mirror / "example.org" / "datasets" / "v1" / "file.bin").write_bytes(PAYLOAD)
    for m in (str(mirror), mirror.as_uri()):
        dest = download(url, tmp_path / "c" / m[-6:] / "file.bin", md5=_md5(PAYLOAD), mirror=m, progress=False)
        assert dest.read_bytes() == PAYLOAD
    got = fetch_file({"url": url, "md5": _md5(PAYLOAD), "size": len(PAYLOAD)}, tmp_path / "d", mirror=str(mirror),
                     progress=False)
    assert got == tmp_path / "d" / "file.bin" and got.read_bytes() == PAYLOAD
    with pytest.raises(DownloadError) as info:  # not in the mirror: names both the URL and the path tried
        download("https://example.org/nope.bin", tmp_path / "e.bin", mirror=str(mirror), progress=False)
    assert "https://example.org/nope.bin" in str(info.value) and "example.org/nope.bin" in str(info.value)
    assert str(mirror) in str(info.value)


def test_http_mirror_and_resolve_url(server, tmp_path):
    (server.root / "example.org" / "d").mkdir(parents=True)
    (server.root / "example.org" / "d" / "f.bin").write_bytes(PAYLOAD)
    dest = fetch_file({"url": "https://example.org/d/f.bin", "filename": "renamed.bin", "md5": _md5(PAYLOAD)},
                      tmp_path, mirror=server.base + "/", progress=False, timeout=5)
    assert dest.name == "renamed.bin" and dest.read_bytes() == PAYLOAD
    assert server.requests[0][0] == "/example.org/d/f.bin"
    assert resolve_url("https://h.org/a/b.zip", None) == "https://h.org/a/b.zip"
    assert resolve_url("https://h.org/a/b.zip", "https://m.net/z") == "https://m.net/z/h.org/a/b.zip"
    assert resolve_url("https://h.org/uc?id=1&x=y", "file:///m") == "file:///m/h.org/uc_id-1_x-y"
    assert resolve_url("file:///tmp/x.zip", "/m") == "file:///tmp/x.zip"


def test_log_lines(server, tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="zsdr.download"):
        download(f"{server.base}/data/file.bin", tmp_path / "f.bin", progress=False, timeout=5)
    assert any("downloading" in r.message for r in caplog.records)


# ------------------------------------------------------------------------------------------- extract

def _tar(path: Path, members: list[tuple], mode="w:gz") -> Path:
    with tarfile.open(path, mode) as tf:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
            else:
                info.type = {"dir": tarfile.DIRTYPE, "sym": tarfile.SYMTYPE, "hard": tarfile.LNKTYPE,
                             "fifo": tarfile.FIFOTYPE}[kind]
                info.linkname = data or ""
                tf.addfile(info)
    return path


def _zip(path: Path, members: dict) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def test_extract_tar_gz_and_zip_with_strip(tmp_path):
    tgz = _tar(tmp_path / "a.tar.gz", [("top", "dir", None), ("top/sub/x.txt", "file", b"x"),
                                       ("top/y.txt", "file", b"y"), ("top/link", "sym", "y.txt")])
    out = extract(tgz, tmp_path / "t", strip=1)
    assert (out / "sub" / "x.txt").read_bytes() == b"x" and (out / "link").read_bytes() == b"y"
    z = _zip(tmp_path / "a.zip", {"root/": b"", "root/corpus.jsonl": b"{}\n", "root/q/qrels.tsv": b"q\n"})
    out = extract(z, tmp_path / "z", strip=1)
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == ["corpus.jsonl", "q", "q/qrels.tsv"]
    # content, not the name, decides the format; plain and xz tars work too
    disguised = tmp_path / "data.bin"
    disguised.write_bytes(z.read_bytes())
    assert (extract(disguised, tmp_path / "z2") / "root" / "corpus.jsonl").is_file()
    for mode in ("w", "w:xz", "w:bz2"):
        t = _tar(tmp_path / f"p.{mode[-2:]}", [("f.txt", "file", b"f")], mode=mode)
        assert (extract(t, tmp_path / f"o{mode[-2:]}") / "f.txt").read_bytes() == b"f"
    # a dest_dir that holds anything is never replaced (it holds exactly an archive's contents: no marker
    # says zsdr wrote it); an empty one is used
    with pytest.raises(DataError, match="z: refusing to replace this folder: it holds corpus.jsonl, q/"):
        extract(tgz, tmp_path / "z")
    assert (tmp_path / "z" / "corpus.jsonl").is_file()
    (tmp_path / "empty").mkdir()
    assert (extract(tgz, tmp_path / "empty") / "top" / "y.txt").read_bytes() == b"y"


@pytest.mark.parametrize("case", ["zip-slip", "zip-abs", "zip-symlink", "tar-slip", "tar-abs", "tar-symlink",
                                  "tar-symlink-chain", "tar-write-through-link", "tar-hardlink", "tar-fifo"])
def test_extract_refuses_unsafe_members(tmp_path, case):
    work = tmp_path / "work"
    work.mkdir()
    ok = ("ok.txt", "file", b"fine")
    if case == "zip-slip":
        archive = _zip(work / "a.zip", {"ok.txt": b"fine", "../evil.txt": b"evil"})
    elif case == "zip-abs":
        archive = _zip(work / "a.zip", {"ok.txt": b"fine", "/tmp/evil.txt": b"evil"})
    elif case == "zip-symlink":
        archive = work / "a.zip"
        with zipfile.ZipFile(archive, "w") as zf:
            info = zipfile.ZipInfo("link")
            info.external_attr = (0o120777 << 16)
            zf.writestr(info, "/etc/passwd")
    elif case == "tar-slip":
        archive = _tar(work / "a.tgz", [ok, ("sub/../../evil.txt", "file", b"evil")])
    elif case == "tar-abs":
        archive = _tar(work / "a.tgz", [ok, (str(tmp_path / "evil.txt"), "file", b"evil")])
    elif case == "tar-symlink":
        archive = _tar(work / "a.tgz", [ok, ("link", "sym", "../../.."), ("link/evil.txt", "file", b"evil")])
    elif case == "tar-symlink-chain":
        archive = _tar(work / "a.tgz", [("x/z", "sym", "y/.."), ("x/y", "sym", ".."), ("x/z/evil.txt", "file", b"e")])
    elif case == "tar-write-through-link":
        archive = _tar(work / "a.tgz", [("d", "sym", "."), ("d/evil.txt", "file", b"evil")])
    elif case == "tar-hardlink":
        archive = _tar(work / "a.tgz", [ok, ("passwd", "hard", "/etc/passwd")])
    else:
        archive = _tar(work / "a.tgz", [ok, ("pipe", "fifo", None)])
    before = _files(tmp_path)
    with pytest.raises(DownloadError, match="unsafe member") as info:
        extract(archive, tmp_path / "dest")
    assert str(archive) in str(info.value)
    assert _files(tmp_path) == before  # nothing at dest, no temporary folder, nothing written outside
    assert not Path("/tmp/evil.txt").exists() or Path("/tmp/evil.txt").read_bytes() != b"evil"


def test_extract_truncated_archives_fail_cleanly(tmp_path):
    big = bytes(range(256)) * 4000
    tgz = _tar(tmp_path / "a.tar.gz", [("a.bin", "file", big), ("b.bin", "file", big[::-1])])
    z = _zip(tmp_path / "a.zip", {"a.bin": big, "b.bin": big[::-1]})
    for archive in (tgz, z):
        cut = tmp_path / f"cut-{archive.name}"
        cut.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
        before = _files(tmp_path)
        with pytest.raises(DownloadError, match="truncated|corrupt") as info:
            extract(cut, tmp_path / "out")
        assert str(cut) in str(info.value)
        assert _files(tmp_path) == before
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(b"not an archive at all" * 100)
    with pytest.raises(DownloadError, match="not a zip/tar"):
        extract(garbage, tmp_path / "out")
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------ sidecars and locking

def test_unverified_source_is_checked_against_its_recorded_sha256(server, tmp_path, caplog):
    """A source without a published checksum is verified against the sha256 recorded when it was
    downloaded: a copy damaged later (e.g. appended to by a second writer) is fetched again."""
    dest = tmp_path / "f.bin"
    download(f"{server.base}/data/file.bin", dest, progress=False, timeout=5)
    sidecar = tmp_path / "f.bin.sha256"
    assert sidecar.read_text().split()[0] == _sha(PAYLOAD)
    download(f"{server.base}/data/file.bin", dest, progress=False, timeout=5)
    assert len(server.requests) == 1  # intact: reused
    with open(dest, "ab") as fh:
        fh.write(b"bytes a slower writer appended after the rename")
    with caplog.at_level(logging.WARNING, logger="zsdr.download"):
        download(f"{server.base}/data/file.bin", dest, progress=False, timeout=5)
    assert "sha256 recorded when it was downloaded" in caplog.text
    assert dest.read_bytes() == PAYLOAD and len(server.requests) == 2
    assert sidecar.read_text().split()[0] == _sha(PAYLOAD)


def test_file_placed_by_hand_gets_a_sidecar(server, tmp_path):
    dest = tmp_path / "f.bin"
    dest.write_bytes(b"placed by hand")
    download(f"{server.base}/data/file.bin", dest, progress=False)
    assert server.requests == [] and dest.read_bytes() == b"placed by hand"
    assert (tmp_path / "f.bin.sha256").read_text() == f"{_sha(b'placed by hand')}  f.bin\n"


def test_lock_is_exclusive_and_removed(tmp_path):
    """file_lock: a second holder is refused (wait=False) or waits; the lock file goes away after."""
    from zsdr.io import file_lock

    target = tmp_path / "x.bin"
    done = threading.Event()
    order = []

    def second():
        with file_lock(target, what="the download of x.bin"):
            order.append("second")
        done.set()

    with file_lock(target, what="the download of x.bin") as lock:
        assert lock.is_file() and f"pid {__import__('os').getpid()}" in lock.read_text()
        with pytest.raises(DataError, match="in progress in pid .*wait for it to finish"):
            with file_lock(target, wait=False):
                pass
        thread = threading.Thread(target=second)
        thread.start()
        assert not done.wait(0.3)  # blocked while we hold it
        order.append("first")
    assert done.wait(10)
    thread.join(5)
    assert order == ["first", "second"] and not lock.exists()


def test_a_conversion_refuses_an_archive_changed_since_its_download(server, tmp_path):
    """The converter reads a download long after it was verified (a Snakemake rule of its own): it checks
    the recorded sha256 first, so a damaged archive is named instead of converted."""
    from zsdr.data.download import verify_recorded

    dest = download(f"{server.base}/data/file.bin", tmp_path / "f.bin", progress=False, timeout=5)
    assert verify_recorded(dest) is True
    assert verify_recorded(tmp_path / "unrecorded.bin") is False
    with open(dest, "r+b") as fh:
        fh.write(b"X")
    with pytest.raises(DownloadError, match=r"f\.bin: the file changed since it was downloaded \(sha256 recorded in "
                                            r"f\.bin\.sha256: [0-9a-f]{64}, now [0-9a-f]{64}\) \(fix: delete "):
        verify_recorded(dest)


def test_a_decompression_bomb_is_refused_before_it_is_written(tmp_path, capsys, monkeypatch):
    """A 194 KB zip expanded to 200 MB with no limit."""
    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        zf.writestr("root/corpus.jsonl", b"\0" * (200 * 2 ** 20))
    size = bomb.stat().st_size
    assert size < 250_000
    with pytest.raises(DownloadError) as err:
        extract(bomb, tmp_path / "out")
    ratio = 200 * 2 ** 20 / size
    assert str(err.value) == (
        f"{bomb}: expands to 209.7 MB from {size / 1000:,.1f} KB ({ratio:,.0f} times its size, more than 100): refused "
        "as a possible decompression bomb, before writing it (fix: if the archive is genuine, allow it with "
        f"ZSDR_EXTRACT_MAX_RATIO={ratio * 2:.0f} and run again)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bomb.zip"]   # nothing written, no temporary left
    # a tar.gz the same way, refused at the member that passes the limit (before the rest is decompressed)
    tgz = _tar(tmp_path / "bomb.tar.gz", [("a.bin", "file", b"\0" * (80 * 2 ** 20)), ("b.bin", "file", b"x")])
    with pytest.raises(DownloadError, match="a possible decompression bomb"):
        extract(tgz, tmp_path / "out")
    # a genuine archive past a limit: the variable the message names lets it through
    monkeypatch.setattr(archives, "RATIO_FLOOR", 2 ** 20)
    small = _zip(tmp_path / "small.zip", {"zeros": b"\0" * (3 * 2 ** 20)})
    with pytest.raises(DownloadError, match="ZSDR_EXTRACT_MAX_RATIO="):
        extract(small, tmp_path / "out")
    monkeypatch.setenv("ZSDR_EXTRACT_MAX_RATIO", "100000")
    assert (extract(small, tmp_path / "out") / "zeros").stat().st_size == 3 * 2 ** 20
    many = _zip(tmp_path / "many.zip", {f"f{i}": b"x" for i in range(5)})
    monkeypatch.setenv("ZSDR_EXTRACT_MAX_MEMBERS", "4")
    with pytest.raises(DownloadError, match="holds more than 4 members: refused .* ZSDR_EXTRACT_MAX_MEMBERS=40 "):
        extract(many, tmp_path / "many")
    monkeypatch.delenv("ZSDR_EXTRACT_MAX_MEMBERS")
    monkeypatch.setenv("ZSDR_EXTRACT_MAX_BYTES", "4")
    with pytest.raises(DownloadError, match="expands to more than 4 bytes"):
        extract(many, tmp_path / "many")
    monkeypatch.setenv("ZSDR_EXTRACT_MAX_BYTES", "lots")
    with pytest.raises(DownloadError, match="ZSDR_EXTRACT_MAX_BYTES='lots' is not a positive number"):
        extract(many, tmp_path / "many")
    assert not (tmp_path / "many").exists()


@pytest.mark.parametrize("release, archive", [("ance-warmup", "bomb.zip"), ("condenser", "bomb.tar.gz")])
def test_a_released_checkpoints_archive_is_held_to_the_same_limits(tmp_path, release, archive):
    """zsdr.models.released unpacks its own archives (ANCE's zips, condenser.tar.gz): a bomb there is refused
    the same way, naming the archive, before anything is written."""
    from zsdr.models.released import convert

    zeros = b"\0" * (80 * 2 ** 20)
    bomb = (_zip(tmp_path / archive, {"ckpt/pytorch_model.bin": zeros}) if archive.endswith(".zip")
            else _tar(tmp_path / archive, [("ckpt/model.pt", "file", zeros)]))
    with pytest.raises(DownloadError) as err:
        convert(release, bomb, tmp_path / "out")
    assert str(err.value).startswith(f"{bomb}: expands to 83.9 MB from ") and "decompression bomb" in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == [archive]

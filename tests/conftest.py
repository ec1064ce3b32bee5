import contextlib
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"


# Only the SLURM test talks to a cluster. Every other Snakemake run is local, but Snakemake's SLURM executor
# plugin probes the cluster's configuration (`scontrol show config`) whenever Snakemake starts: with the
# SLURM client installed and no controller answering, that probe waits ~9 s per start. An empty
# configuration makes it fail at once; test_slurm.py restores the original (kept in the environment, so
# that pytest-xdist's workers and a second import of this module see the value from before any change).
if "ZSDR_TESTS_SLURM_CONF" not in os.environ:
    os.environ["ZSDR_TESTS_SLURM_CONF"] = os.environ.get("SLURM_CONF", "")
    os.environ["SLURM_CONF"] = os.devnull


def _shared_data() -> Path:
    env = os.environ.get("ZSDR_SHARED_DATA")
    return Path(env) if env else ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real data folder beside the project (../shared/data); tests using it skip without it."""
    path = _shared_data()
    if not path.is_dir():
        pytest.skip(f"real data folder not present ({path}); set ZSDR_SHARED_DATA to run this test")
    return path


@pytest.fixture(scope="session")
def fixtures() -> Path:
    return FIXTURES


def mini_with_backbones(root: Path, mini: dict, size: dict, kinds=("bert", "roberta")) -> Path:
    """A generated mini benchmark under ``root/data`` and a tiny backbone per kind (``root/<kind>``)."""
    from zsdr.data.mini import generate
    from zsdr.models.tiny import build_tiny_backbone

    generate(mini, root / "data")
    for kind in kinds:
        build_tiny_backbone(kind, [root / "data" / "src"], root / kind, size, vocab_size=600, seed=0)
    return root


@contextlib.contextmanager
def texts_hidden(dataset: Path):
    """Build ``dataset``'s store, then, inside the block, make its ``corpus.jsonl`` and ``queries.jsonl``
    unreadable as JSON (the same size and modification time, so the store stays current): whatever
    reads the texts inside the block reads them from the store. The files are restored afterwards."""
    from zsdr.data.store import build_store, store_dir, store_is_current

    dataset = Path(dataset)
    if not store_is_current(store_dir(dataset), dataset):
        build_store(dataset)
    saved = {}
    for name in ("corpus.jsonl", "queries.jsonl"):
        path = dataset / name
        st = path.stat()
        saved[path] = (path.read_bytes(), st.st_atime_ns, st.st_mtime_ns)
        path.write_bytes(b"#" * (st.st_size - 1) + b"\n")
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    try:
        assert store_is_current(store_dir(dataset), dataset)
        yield dataset
    finally:
        for path, (data, atime, mtime) in saved.items():
            path.write_bytes(data)
            os.utime(path, ns=(atime, mtime))


def pytest_collection_modifyitems(session, config, items):
    """The longest modules first: the real mini run (tests/test_mini_run.py, by far the longest), the real
    SLURM run (tests/test_slurm.py, mostly waiting for its cluster), then the trainer's (tests/test_training.py,
    ~7 min of multi-process trainings), then the rest in file order. With pytest-xdist (`make test`: `--dist
    loadfile --no-loadscope-reorder`, one module per worker, handed out in this order as workers ask) the
    three start at once on three workers and the short modules fill in beside them, so no worker idles at the
    end while one long module finishes. In file order test_training.py came last, after the mini run on the
    same worker: that worker ran ~1,220 s while the other two ended at ~1,090 and ~880 s (2 cores, 3 workers).
    (Handing out the ten longest modules first was no faster: a run 22:28 against 21:34.)"""
    order = {"test_mini_run.py": 0, "test_slurm.py": 1, "test_training.py": 2}
    items.sort(key=lambda item: order.get(Path(str(item.fspath)).name, 3))


@pytest.fixture
def offline_hub(tmp_path, monkeypatch):
    """A Hugging Face cache on disk, used offline: ``offline_hub(repo_id, files)`` lays ``files`` (a folder
    to copy, or ``{name: source path or bytes}``) out as ``models--org--name/snapshots/<rev>/`` with
    ``refs/main`` naming the revision, the way the hub client writes its cache, and returns the snapshot."""
    import shutil

    from huggingface_hub import constants

    cache = tmp_path / "hf-home" / "hub"
    cache.mkdir(parents=True)
    monkeypatch.setenv("HF_HOME", str(cache.parent))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)

    def add(repo_id: str, files, revision: str = "0" * 39 + "1") -> Path:
        repo = cache / ("models--" + repo_id.replace("/", "--"))
        snapshot = repo / "snapshots" / revision
        if isinstance(files, (str, Path)):
            shutil.copytree(files, snapshot)
        else:
            snapshot.mkdir(parents=True)
            for name, source in files.items():
                target = snapshot / name
                target.parent.mkdir(parents=True, exist_ok=True)
                if isinstance(source, bytes):
                    target.write_bytes(source)
                else:
                    shutil.copyfile(source, target)
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / "main").write_text(revision)
        return snapshot

    return add

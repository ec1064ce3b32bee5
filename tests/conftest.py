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


ACCEPTANCE = pytest.mark.skipif(os.environ.get("ZSDR_ACCEPTANCE") != "1",
                                reason="set ZSDR_ACCEPTANCE=1 (real runs: minutes on the CPU; docs/development.md)")
"""The opt-in acceptance runs on real data (SciFact encoded with MiniLM, the regression target's real runs): the
default suite runs wherever the shared data is, CI included, and these take minutes on two cores."""


# Seconds each module ran in a `make test` on 2 cores (3 workers, a clean clone), for the modules of 10 s or more.
MODULE_SECONDS = {
    "test_slurm.py": 540, "test_training.py": 503, "test_mini_run.py": 490, "test_readme.py": 200,
    "test_dense.py": 60, "test_evaluation.py": 98, "test_workflow.py": 91, "test_plan_golden.py": 88,
    "test_site.py": 73, "test_reliability.py": 72, "test_elsewhere.py": 44, "test_reader.py": 30, "test_rmsc.py": 25,
    "test_berm.py": 25, "test_export.py": 24, "test_pyserini_api.py": 24, "test_params.py": 23, "test_coco.py": 21,
    "test_weak.py": 19, "test_encoder.py": 19, "test_reruns.py": 18, "test_modir.py": 18, "test_devices.py": 18,
    "test_plan.py": 14, "test_store.py": 14, "test_terms.py": 14, "test_checkpoints.py": 13, "test_tiny.py": 13,
    "test_warm.py": 12, "test_scales.py": 12, "test_adapters.py": 12, "test_hparams.py": 10,
}


def pytest_collection_modifyitems(session, config, items):
    """The longest modules first (MODULE_SECONDS; the others after them, in file order). With pytest-xdist
    (`make test`: `--dist loadfile --no-loadscope-reorder`, one module per worker, handed out in this order as
    workers ask) the three longest (the real SLURM run, the trainer's multi-process trainings, the real mini run)
    start at once on three workers, the shorter modules fill in beside them and the last ones handed out are the
    shortest, so no worker runs on alone for long at the end. In file order after the three longest, a
    clean-clone run ended its workers at 976, 894 and 899 s: one worker ran a 91 s module alone at the end."""
    items.sort(key=lambda item: -MODULE_SECONDS.get(Path(str(item.fspath)).name, 0))


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

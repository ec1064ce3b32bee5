"""tools/install.py: pip's package sources reach uv, in pip's order of precedence."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("install", ROOT / "tools" / "install.py")
install = importlib.util.module_from_spec(spec)
spec.loader.exec_module(install)


def test_pip_sources_become_uv_options():
    config = "\n".join([
        ":env:.find-links='/wheels'",
        ":env:.default-timeout='180'",
        "global.find-links='/other-wheels'",
        "global.extra-index-url='file:///mirror/simple https://example.org/simple'",
        "global.constraint='/etc/constraints.txt'",
        "global.cert='/etc/ssl/ca.pem'",
        "install.index-url='https://pypi.example/simple'",
        "global.index-url='https://ignored.example/simple'",
    ])
    args, env = install.uv_options(config)
    assert args == ["--index-url", "https://pypi.example/simple",
                    "--extra-index-url", "file:///mirror/simple", "--extra-index-url", "https://example.org/simple",
                    "--find-links", "/wheels", "--index-strategy", "unsafe-best-match",
                    "--constraint", "/etc/constraints.txt"]
    assert env == {"SSL_CERT_FILE": "/etc/ssl/ca.pem"}


def test_no_pip_configuration_means_no_options():
    assert install.uv_options("") == ([], {})
    assert install.uv_options("global.timeout='60'\n") == ([], {})


def test_torch_comes_from_pyproject():
    assert install.TORCH.startswith("torch==") and install.TORCH in (ROOT / "pyproject.toml").read_text()


def test_an_install_is_the_lock_then_zsdr_without_resolving():
    """`make install` / `make install-dev`: the lock's packages, hash-checked and without dependency
    resolution, then zsdr itself; an extra with no lock (gpu) is resolved, within the constraints."""
    cpu, dev = str(ROOT / "requirements" / "cpu.txt"), str(ROOT / "requirements" / "dev.txt")
    assert install.requirements([]) == [["--require-hashes", "--no-deps", "-r", cpu], ["--no-deps", "-e", str(ROOT)]]
    assert install.requirements(["dev"]) == [["--require-hashes", "--no-deps", "-r", dev],
                                             ["--no-deps", "-e", str(ROOT)]]
    assert install.requirements(["dev", "dev"]) == install.requirements(["dev"])
    constraints = str(ROOT / "requirements" / "constraints.txt")
    assert install.requirements(["gpu"]) == [["--constraint", constraints, "-e", f"{ROOT}[gpu]"]]
    for steps in (install.requirements([]), install.requirements(["dev"])):
        assert Path(steps[0][-1]).is_file()


def test_the_locks_are_the_ones_lock_py_writes():
    spec = importlib.util.spec_from_file_location("lock", ROOT / "tools" / "lock.py")
    lock = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lock)
    written = {lock.REQUIREMENTS / name: extras for name, (extras, _, _) in lock.LOCKS.items()}
    assert written == {path: list(extras) for extras, path in install.LOCKS.items()}
    assert lock.UNLOCKED == (install.TORCH.split("==")[0],)
    for name, (_, what, target) in lock.LOCKS.items():
        assert (lock.REQUIREMENTS / name).read_text().startswith(lock.HEADER.format(what=what, target=target))


def test_a_lock_is_installed_without_pips_constraints():
    """uv refuses a constraint that is not pinned with == (pip's torch<=2.14.1) in --require-hashes mode;
    the lock was compiled within the constraints, so its step goes without them."""
    sources = ["--extra-index-url", "file:///mirror/simple", "--constraint", "/etc/c.txt", "--find-links", "/w"]
    lock_step, zsdr_step = install.requirements(["dev"])
    assert install.sources_for(lock_step, sources) == ["--extra-index-url", "file:///mirror/simple",
                                                       "--find-links", "/w"]
    assert install.sources_for(zsdr_step, sources) == sources

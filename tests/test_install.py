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

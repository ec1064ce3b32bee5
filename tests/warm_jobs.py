"""Python jobs of the tests started warm: forked from a zsdr.warm server of this test process.

A training test starts `python -m zsdr train ...` a few dozen times; each new interpreter spends ~5.5 s of
CPU importing torch and transformers before its first step. Through `popen` the command goes to
`warm_client.py`, and a server of this process (started on first use, with the libraries loaded once)
forks it: the same command line, environment, working directory and standard streams, its exit status or
its signal death reported by the client, and signals sent to the client forwarded to the job (a SIGKILL
to the client ends the job too). A command the server cannot run exactly as given (another environment,
another form) runs cold, as `subprocess.Popen` would run it; tests/test_warm.py holds the server to that.
"""

import atexit
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from zsdr.warm import PRELOAD

CLIENT = Path(__file__).resolve().parents[1] / "src" / "zsdr" / "warm_client.py"
# pytest's per-test variable: not part of a job's environment (it would differ from the server's)
PER_TEST = ("PYTEST_CURRENT_TEST",)
_servers: dict[tuple, dict] = {}


def job_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without pytest's per-test variable, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in PER_TEST}
    env.update(extra or {})
    return env


def _comparable(env: dict[str, str]) -> tuple:
    from zsdr.warm import _comparable as comparable

    return tuple(sorted(comparable({k: v for k, v in env.items() if not k.startswith("ZSDR_WARM_")}).items()))


def _server(env: dict[str, str], preload: tuple[str, ...] = PRELOAD) -> dict:
    """The server for jobs of environment ``env`` that loads ``preload`` (one per distinct pair), started."""
    key = (_comparable(env), tuple(preload))
    server = _servers.get(key)
    if server is not None and server["process"].poll() is None:
        return server
    folder = tempfile.mkdtemp(prefix="zsdr-warm-tests-")
    socket_path = os.path.join(folder, "socket")
    server_env = {**env, "ZSDR_WARM_SOCKET": socket_path, "ZSDR_WARM_PYTHON": sys.executable}
    log = open(os.path.join(folder, "warm.log"), "w")
    process = subprocess.Popen([sys.executable, "-m", "zsdr.warm", "serve", socket_path, str(os.getpid()),
                                ",".join(preload)], env=server_env, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    log.close()
    deadline = time.time() + 300
    while not os.path.exists(socket_path):
        if process.poll() is not None or time.time() > deadline:
            raise RuntimeError(f"the tests' warm server did not start: {Path(folder, 'warm.log').read_text()}")
        time.sleep(0.02)
    server = _servers[key] = {"process": process, "folder": folder, "env": server_env}
    return server


def popen(args: list[str], env: dict[str, str] | None = None, preload: tuple[str, ...] = PRELOAD,
          **kwargs) -> subprocess.Popen:
    """`subprocess.Popen(args, env=env, ...)` for ``args`` = [sys.executable, ...], run by a warm server that
    has loaded ``preload``. ``env``: the job's environment (default: :func:`job_env`)."""
    env = job_env() if env is None else env
    assert args[0] == sys.executable, args
    server = _server(env, preload)
    return subprocess.Popen([sys.executable, "-I", "-S", str(CLIENT), *args],
                            env={**env, **{k: server["env"][k] for k in ("ZSDR_WARM_SOCKET", "ZSDR_WARM_PYTHON")}},
                            **kwargs)


def run(args: list[str], env: dict[str, str] | None = None, preload: tuple[str, ...] = PRELOAD,
        timeout: float | None = None, **kwargs) -> subprocess.CompletedProcess:
    """`subprocess.run(args, capture_output=True, text=True, ...)` through :func:`popen`: the output, the
    exit status, and at ``timeout`` the job killed (through its client) and `subprocess.TimeoutExpired`."""
    with popen(args, env, preload, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def warm_log() -> str:
    """What the servers of this process logged (jobs started warm and cold, and why)."""
    return "".join(Path(s["folder"], "warm.log").read_text() for s in _servers.values())


@atexit.register
def _stop() -> None:
    import shutil

    for server in _servers.values():
        if server["process"].poll() is None:
            server["process"].terminate()
            try:
                server["process"].wait(timeout=10)
            except subprocess.TimeoutExpired:
                server["process"].kill()
        shutil.rmtree(server["folder"], ignore_errors=True)

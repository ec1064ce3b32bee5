"""zsdr.warm: a job forked from the warm server behaves as `python <script>` would, or runs cold."""

import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from zsdr.warm import start_server, stop_server

ROOT = Path(__file__).resolve().parent.parent
CLIENT = ROOT / "src" / "zsdr" / "warm_client.py"

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="zsdr.warm runs on Linux")


class Shell:
    """Stands in for Snakemake's `shell`: keeps the prefix start_server sets."""

    value = None

    @classmethod
    def prefix(cls, value):
        cls.value = value


@pytest.fixture
def server(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "src"))
    started = []

    def start(preload=("json",)):
        warm = start_server(Shell, CLIENT, log=str(tmp_path / "warm.log"), preload=preload)
        started.append(warm)
        deadline = time.time() + 60
        while not os.path.exists(os.environ["ZSDR_WARM_SOCKET"]) and warm["process"].poll() is None:
            assert time.time() < deadline, "the server did not come up"
            time.sleep(0.02)
        return warm

    yield start
    for warm in started:
        stop_server(warm)


def job(tmp_path, name, body):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def run(script, env=None, **kwargs):
    """The job as Snakemake runs it: bash, the prefix, then `python <script>`."""
    command = f"{Shell.value}{sys.executable} {script}"
    return subprocess.Popen(["bash", "-c", command], env={**os.environ, **(env or {})}, **kwargs)


def log(tmp_path):
    return (tmp_path / "warm.log").read_text()


def test_a_warm_job_is_python_script(server, tmp_path):
    server()
    script = job(tmp_path, "job.py", """
        import os, sys
        print(sys.argv, os.getcwd(), __name__, os.environ["OMP_NUM_THREADS"], oct(os.umask(0)))
        print("to stderr", file=sys.stderr)
        sys.exit(3)
    """)
    (tmp_path / "sub").mkdir()
    proc = run(script, {"OMP_NUM_THREADS": "2"}, cwd=tmp_path / "sub", stdout=subprocess.PIPE,
               stderr=subprocess.PIPE, text=True, preexec_fn=lambda: os.umask(0o027))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 3
    assert out == f"['{script}'] {tmp_path / 'sub'} __main__ 2 0o27\n"
    assert err == "to stderr\n"
    assert "cold start" not in log(tmp_path)
    # what each job cost, per script (a local run's CPU beside Snakemake's own)
    assert re.search(r"job\.py \(pid \d+\) ended with exit status 3: \d+\.\d s CPU, \d+ MB peak", log(tmp_path))


def test_a_script_with_arguments_and_a_module_run_warm_as_python_runs_them(server, tmp_path, monkeypatch):
    """`python SCRIPT ARGS` and `python -m MODULE ARGS` (how the tests start their trainings): the same
    sys.argv, sys.path[0], __main__ and exit status as a new interpreter gives them."""
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{os.environ['PYTHONPATH']}")  # finds pkg
    server()
    body = """
        import os, sys
        print(repr(sys.argv), sys.path[0], __name__)
        sys.exit(int(sys.argv[-1]))
    """
    script = job(tmp_path, "args.py", body)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    job(tmp_path / "pkg", "__main__.py", body)
    (tmp_path / "sub").mkdir()
    for args in ([str(script), "a b", "--flag", "4"], ["-m", "pkg", "x", "5"]):
        plain = subprocess.run([sys.executable, *args], cwd=tmp_path / "sub", capture_output=True, text=True)
        warm = subprocess.run([sys.executable, "-I", "-S", str(CLIENT), sys.executable, *args], cwd=tmp_path / "sub",
                              capture_output=True, text=True)
        assert (warm.returncode, warm.stdout, warm.stderr) == (plain.returncode, plain.stdout, plain.stderr), args
        assert plain.returncode == int(args[-1])
    log_text = log(tmp_path)
    assert "cold start" not in log_text and "-m pkg (pid" in log_text and "args.py (pid" in log_text, log_text


def test_an_uncaught_exception_exits_1_with_the_scripts_traceback(server, tmp_path):
    server()
    script = job(tmp_path, "fails.py", """
        def f():
            raise ValueError("the job's own error")
        f()
    """)
    proc = run(script, stderr=subprocess.PIPE, text=True)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert err.startswith("Traceback (most recent call last):\n") and "ValueError: the job's own error" in err
    assert "warm.py" not in err and "runpy" not in err, err
    assert "cold start" not in log(tmp_path)


def test_signals_are_forwarded_and_a_signal_death_is_reported_as_such(server, tmp_path):
    server()
    script = job(tmp_path, "handles.py", """
        import signal, sys, time
        from pathlib import Path
        signal.signal(signal.SIGUSR1, lambda *_: sys.exit(7))
        Path("ready").write_text("")
        time.sleep(60)
    """)
    proc = run(script)
    while not (tmp_path / "ready").exists():
        time.sleep(0.02)
    proc.send_signal(signal.SIGUSR1)  # to bash, which runs the client in its place
    assert proc.wait(timeout=60) == 7

    script = job(tmp_path, "killed.py", """
        import os, signal
        os.kill(os.getpid(), signal.SIGTERM)
    """)
    assert run(script).wait(timeout=60) == -signal.SIGTERM  # bash ran the client in its place: it died of it too


def test_a_killed_client_takes_its_job_with_it(server, tmp_path):
    server()
    script = job(tmp_path, "sleeps.py", """
        import os, time
        from pathlib import Path
        Path("pid").write_text(str(os.getpid()))
        time.sleep(120)
    """)
    proc = subprocess.Popen([sys.executable, "-I", "-S", str(CLIENT), sys.executable, str(script)])
    while not (tmp_path / "pid").exists() or not (tmp_path / "pid").read_text():
        time.sleep(0.02)
    child = int((tmp_path / "pid").read_text())
    assert child != proc.pid  # it runs in the server's child
    proc.kill()
    proc.wait()
    deadline = time.time() + 30
    while Path(f"/proc/{child}").exists() and "Z" not in Path(f"/proc/{child}/stat").read_text().split()[2]:
        assert time.time() < deadline, "the job outlived its client"
        time.sleep(0.05)


def test_a_job_whose_environment_differs_runs_cold(server, tmp_path):
    server()
    script = job(tmp_path, "pid.py", """
        import os, sys
        print(os.getppid(), os.environ.get("EXTRA"))
    """)
    proc = run(script, {"EXTRA": "1"}, stdout=subprocess.PIPE, text=True)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and out.split()[1] == "1"
    assert "cold start" in log(tmp_path) and "differs from the server's: EXTRA" in log(tmp_path)
    # the per-job thread variables and TMPDIR are not a difference
    proc = run(script, {"OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)}, stdout=subprocess.PIPE, text=True)
    proc.communicate(timeout=60)
    assert log(tmp_path).count("cold start") == 1


def test_without_a_server_or_for_another_command_the_client_execs(tmp_path, monkeypatch):
    script = job(tmp_path, "plain.py", "import os; print(os.getpid())\n")
    monkeypatch.setenv("ZSDR_WARM_SOCKET", str(tmp_path / "missing"))
    monkeypatch.setenv("ZSDR_WARM_PYTHON", sys.executable)
    proc = subprocess.Popen([sys.executable, "-I", "-S", str(CLIENT), sys.executable, str(script)],
                            stdout=subprocess.PIPE, text=True)
    out, _ = proc.communicate(timeout=60)
    assert int(out) == proc.pid  # the client became the job
    out = subprocess.run([sys.executable, "-I", "-S", str(CLIENT), "echo", "a", "b"], capture_output=True, text=True)
    assert out.stdout == "a b\n"


def test_a_server_whose_libraries_start_threads_serves_nothing(server, tmp_path):
    (tmp_path / "threaded.py").write_text("import threading, time\n"
                                          "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n")
    os.environ["PYTHONPATH"] += os.pathsep + str(tmp_path)
    warm = server(preload=("threaded",))
    assert warm["process"].wait(timeout=60) == 1
    assert "started 1 thread(s); jobs start cold" in log(tmp_path)
    script = job(tmp_path, "ok.py", "print('ran')\n")
    proc = run(script, stdout=subprocess.PIPE, text=True)
    assert proc.communicate(timeout=60)[0] == "ran\n" and proc.returncode == 0


def test_a_large_environment_travels_whole(server, tmp_path, monkeypatch):
    for i in range(8):  # 160 kB: the request is sent and read in several pieces
        monkeypatch.setenv(f"LARGE{i}", "x" * 20_000)
    server()
    script = job(tmp_path, "env.py",
                 "import os; print(sum(len(v) for k, v in os.environ.items() if k[:5] == 'LARGE'))\n")
    proc = run(script, stdout=subprocess.PIPE, text=True)
    assert proc.communicate(timeout=60)[0] == "160000\n" and proc.returncode == 0
    assert "cold start" not in log(tmp_path)


def test_a_server_that_ends_on_its_own_leaves_no_folder(server, tmp_path):
    """As when Snakemake is killed before its onerror: the server ends and takes its socket folder along."""
    warm = server()
    folder = Path(os.environ["ZSDR_WARM_SOCKET"]).parent
    warm["process"].terminate()
    assert warm["process"].wait(timeout=60) == 0
    assert not folder.exists()
    assert "jobs started warm" in log(tmp_path)


def test_the_server_is_worth_starting_for_four_python_jobs_or_an_unreadable_dag():
    from types import SimpleNamespace

    from zsdr.warm import MIN_JOBS, worth_starting

    def workflow(scripts):
        jobs = [SimpleNamespace(is_script=s is not None, rule=SimpleNamespace(script=s)) for s in scripts]
        return SimpleNamespace(dag=SimpleNamespace(needrun_jobs=lambda: iter(jobs)))

    assert MIN_JOBS == 4
    assert worth_starting(workflow(["a.py"] * 4))
    assert not worth_starting(workflow(["a.py"] * 3 + ["b.R", None, None]))
    assert not worth_starting(workflow([]))  # nothing to run: no server
    assert worth_starting(SimpleNamespace())  # a DAG this cannot read: started, as before this check


def test_a_run_of_two_evaluations_or_more_has_ranx_preloaded():
    from types import SimpleNamespace

    from zsdr.warm import PRELOAD, preload_for

    def workflow(scripts):
        jobs = [SimpleNamespace(is_script=True, rule=SimpleNamespace(script=f"../workflow_scripts/{s}")) for s in scripts]
        return SimpleNamespace(dag=SimpleNamespace(needrun_jobs=lambda: iter(jobs)))

    assert preload_for(workflow(["train.py", "evaluate.py"])) == PRELOAD
    both = preload_for(workflow(["evaluate.py", "train.py", "evaluate.py"]))
    assert both[: len(PRELOAD)] == PRELOAD and "ranx" in both[len(PRELOAD):]
    assert preload_for(SimpleNamespace()) == PRELOAD


def test_a_job_forked_from_the_server_finds_the_libraries_first_use_caches_built(tmp_path):
    """transformers' table of checkpoint key renamings (PREPARE) is built by a server that loads its module (as
    PRELOAD does), once, and a job loading a model finds it there; a server that does not load transformers does
    not load it to build that."""
    from tests import warm_jobs
    from zsdr.warm import PRELOAD, PREPARE

    assert [name for name, *_ in PREPARE] == ["transformers.conversion_mapping"] and PREPARE[0][0] in PRELOAD
    script = tmp_path / "check.py"
    script.write_text("import sys\nloaded = 'transformers' in sys.modules\n"
                      "import transformers.conversion_mapping as m\n"
                      "print(loaded, m._checkpoint_conversion_mapping_cache is not None)\n")
    job = warm_jobs.run([sys.executable, str(script)], preload=("transformers.conversion_mapping",), timeout=300)
    assert (job.returncode, job.stdout.split()) == (0, ["True", "True"]), job.stderr[-2000:]  # cold: False False
    bare = warm_jobs.run([sys.executable, str(script)], preload=("json",), timeout=300)
    assert (bare.returncode, bare.stdout.split()) == (0, ["False", "False"]), bare.stderr[-2000:]


def test_a_local_run_lifts_only_snakemakes_default_limit_on_job_starts():
    """Snakemake's scheduler (the installed version's own classes): the default 100 starts a second goes, another
    limit stays, and a workflow without that scheduler is left as it is."""
    from types import SimpleNamespace

    from snakemake.scheduling.job_scheduler import JobRateLimiter
    from snakemake.settings.types import MaxJobsPerTimespan

    from zsdr.warm import unlimit_local_starts

    def workflow(limit):
        return SimpleNamespace(scheduler=SimpleNamespace(job_rate_limiter=JobRateLimiter(MaxJobsPerTimespan.parse_choice(limit))))

    default = workflow("100/1s")
    assert unlimit_local_starts(default) and default.scheduler.job_rate_limiter is None
    chosen = workflow("20/1s")
    assert not unlimit_local_starts(chosen) and chosen.scheduler.job_rate_limiter.max_jobs == 20
    assert not unlimit_local_starts(SimpleNamespace())


def test_the_folders_of_a_killed_run_are_removed_at_the_next_start(tmp_path, monkeypatch, request):
    """`kill -9` of Snakemake takes the server with it (PR_SET_PDEATHSIG) before either removes the socket's
    folder: the next start removes every folder whose Snakemake is gone, and no other."""
    import socket
    import tempfile

    from zsdr.warm import remove_stale_folders

    # a short folder: a socket's path must fit AF_UNIX's ~107 bytes, which pytest's own temporary folders
    # (popen-gw1/test_the_folders_of_a_killed_r0/...) do not leave room for
    tmp = Path(tempfile.mkdtemp(prefix="zw", dir="/tmp" if os.path.isdir("/tmp") else None))
    request.addfinalizer(lambda: shutil.rmtree(tmp, ignore_errors=True))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "src"))
    snakemake = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os, sys, time
        sys.path.insert(0, {str(ROOT / 'tests')!r})
        import tempfile
        tempfile.tempdir = {str(tmp)!r}
        from zsdr.warm import start_server
        class Shell:
            prefix = staticmethod(lambda value: None)
        start_server(Shell, {str(CLIENT)!r}, log={str(tmp_path / 'warm.log')!r}, preload=("json",))
        for _ in range(3000):   # at most a minute: a server that cannot start fails the test, not hangs it
            if os.path.exists(os.environ["ZSDR_WARM_SOCKET"]):
                break
            time.sleep(0.02)
        print(os.path.dirname(os.environ["ZSDR_WARM_SOCKET"]), flush=True)
        time.sleep(600)
    """)], stdout=subprocess.PIPE, text=True)
    killed = Path(snakemake.stdout.readline().strip())
    snakemake.kill()
    snakemake.wait()
    time.sleep(0.5)   # the server dies with it
    assert killed.is_dir() and killed.name.startswith(f"zsdr-warm-{snakemake.pid}-")
    live = tmp / f"zsdr-warm-{os.getpid()}-abcd1234"
    live.mkdir()
    old_dead = tmp / "zsdr-warm-ab12cd34"   # an earlier version's name: nothing listens on its socket
    old_dead.mkdir()
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(old_dead / "socket"))
    old_live = tmp / "zsdr-warm-xy98zw76"
    old_live.mkdir()
    listening = socket.socket(socket.AF_UNIX)
    listening.bind(str(old_live / "socket"))
    listening.listen(1)
    other = tmp / "unrelated"
    other.mkdir()
    try:
        assert sorted(remove_stale_folders(str(tmp))) == sorted([str(killed), str(old_dead)])
    finally:
        listening.close()
    assert sorted(p.name for p in tmp.iterdir()) == sorted([live.name, old_live.name, "unrelated"])
    # start_server itself clears them
    (tmp / "zsdr-warm-999999999-dead0000").mkdir()
    warm = start_server(Shell, CLIENT, log=str(tmp_path / "warm2.log"), preload=("json",))
    try:
        assert not (tmp / "zsdr-warm-999999999-dead0000").exists()
        assert Path(os.environ["ZSDR_WARM_SOCKET"]).parent.name.startswith(f"zsdr-warm-{os.getpid()}-")
    finally:
        stop_server(warm)


def test_a_stopped_server_neither_blocks_its_client_nor_keeps_it_from_its_signals(server, tmp_path, monkeypatch):
    """A server stopped with SIGSTOP accepted connections and never answered: the client waited forever and
    ignored Snakemake's SIGTERM. It now gives up after ZSDR_WARM_TIMEOUT seconds and runs the job cold, and
    a SIGTERM ends it at once."""
    monkeypatch.setenv("ZSDR_WARM_TIMEOUT", "1")
    warm = server()
    script = job(tmp_path, "quick.py", """
        import os
        from pathlib import Path
        Path("ran").write_text(str(os.getppid()))
    """)
    pid = warm["process"].pid
    os.kill(pid, signal.SIGSTOP)
    try:
        # (the job's standard streams, sent to the stopped server, stay open until it reads them: a file, not a pipe)
        start = time.monotonic()
        assert run(script, stdout=subprocess.DEVNULL).wait(timeout=60) == 0
        assert int((tmp_path / "ran").read_text()) != pid and time.monotonic() - start < 30   # ran cold
        (tmp_path / "ran").unlink()
        proc = run(script, {"ZSDR_WARM_TIMEOUT": "600"}, stdout=subprocess.DEVNULL)   # would wait 10 minutes
        time.sleep(1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == -signal.SIGTERM
    finally:
        os.kill(pid, signal.SIGCONT)
    # resumed, the server starts neither job again (their clients are gone)
    time.sleep(1)
    assert not (tmp_path / "ran").exists()


def test_a_job_that_ends_while_its_server_is_stopped_fails_instead_of_hanging(server, tmp_path, monkeypatch):
    monkeypatch.setenv("ZSDR_WARM_TIMEOUT", "2")
    warm = server()
    script = job(tmp_path, "slow.py", """
        import time
        from pathlib import Path
        Path("started").write_text("")
        time.sleep(3)
    """)
    with open(tmp_path / "err", "w") as err:
        proc = run(script, stderr=err)
    while not (tmp_path / "started").exists():
        time.sleep(0.02)
    os.kill(warm["process"].pid, signal.SIGSTOP)
    try:
        assert proc.wait(timeout=30) == 1
        assert "ended but the warm server did not report its exit status within 2 s" in (tmp_path / "err").read_text()
    finally:
        os.kill(warm["process"].pid, signal.SIGCONT)


def test_a_request_whose_client_has_gone_is_not_started():
    """A client that gave up on a stopped server ran its job cold: the resumed server must not start it too."""
    import socket

    from zsdr.warm import _client_gone

    server_end, client_end = socket.socketpair()
    client_end.sendall(b"request")
    server_end.recv(7)
    assert not _client_gone(server_end)
    client_end.close()
    assert _client_gone(server_end)
    server_end.close()

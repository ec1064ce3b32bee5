"""Warm job start for local runs: each Python job forks from one interpreter with the libraries loaded.

A job of a local run is a new Python process (`python <script>`) that spends ~3.5 s of CPU importing
torch, transformers and the model classes before its first line of work; a mini run has ~70 such jobs.
With `warm_start: true` (the default), the Snakefile starts this module's server at the start of a local
run: one process that imports those libraries once and then listens on a Unix socket in a private
temporary folder (its messages go to `.snakemake/warm.log`). Each job's command goes through
`warm_client.py`, which hands the server its command, working directory, environment, umask and standard
streams; the server forks a child that becomes the job (`python <script> [args]` or `python -m <module>
[args]` from then on: `sys.argv`, `__main__`, exit status, atexit handlers, uncaught exceptions and their
traceback on stderr), and the client exits with the child's status or dies of its signal. Whatever the
server cannot reproduce exactly runs as before, in a new process: a job whose environment differs from the
server's beyond the per-job thread and temporary-folder variables, another interpreter (a conda
environment), a command of another form (interpreter options), no server (a cluster job, or a job that
starts while the server is still loading), or a server that has threads (fork would copy a held lock) or
has initialised CUDA (a forked child cannot use it). The test suite starts its trainings through a server
of its own (tests/warm_jobs.py).

Signals: the client forwards SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 and SIGALRM to the child
(Snakemake's SIGTERM when a run is cancelled, a user's SIGUSR1). Signals from the terminal (Ctrl-C)
already reach the child, which is in the same process group. A client that dies (SIGKILL) takes its child
with it: the server kills the child when the client's connection closes, and a child dies with the server
(PR_SET_PDEATHSIG). The server exits when the run ends or when the Snakemake process that started it is
gone.

    python -m zsdr.warm serve SOCKET PARENT_PID [MODULES]   # what the Snakefile starts (start_server)

"""

import array
import gc
import json
import os
import selectors
import signal
import socket
import struct
import sys
import time

from zsdr.devices import THREAD_VARIABLES

# The variables Snakemake sets for each job (threads, the tmpdir resource): the child applies them.
JOB_VARIABLES = THREAD_VARIABLES + ("TMPDIR", "TMP", "TEMP", "TEMPDIR")
# What a shell sets for the command it runs (and the terminal size): not a difference between a job's
# environment and the server's.
SHELL_VARIABLES = ("_", "SHLVL", "PWD", "OLDPWD", "PS1", "PS2", "PS4", "COLUMNS", "LINES")
# What a job's start-up imports, loaded once by the server. Nothing here may start a thread (checked).
PRELOAD = (
    "numpy", "pandas", "pyarrow", "pyarrow.parquet", "yaml", "tqdm", "safetensors.torch", "tokenizers",
    "torch", "torch.nn.functional", "transformers", "transformers.modeling_utils", "transformers.conversion_mapping",
    "transformers.models.bert.modeling_bert", "transformers.models.roberta.modeling_roberta",
    "transformers.models.auto.modeling_auto", "transformers.models.auto.tokenization_auto",
    "transformers.tokenization_utils_tokenizers", "matplotlib", "matplotlib.pyplot",
    "zsdr.logs", "zsdr.io", "zsdr.devices", "zsdr.models", "zsdr.training.launch", "zsdr.training.recipes", "zsdr.training.trainer",
    # what every training imports besides (~0.3 s of CPU a training): LoRA's and LAMB's libraries, its task
    "peft", "pytorch_optimizer", "transformers.optimization", "zsdr.training.tasks",
)
# Caches a library builds on first use, built once by the server where it loaded the module (module, function,
# arguments).
# transformers builds its table of checkpoint key renamings (about a thousand compiled patterns, for every
# model type it knows) at a process's first `from_pretrained`: ~0.35 s of CPU in every job that loads a model
# (a 6-step mini training: 2.1 -> 1.7 CPU-s).
PREPARE = (("transformers.conversion_mapping", "get_checkpoint_conversion_mapping", "bert"),)
# Set in the server before it loads anything, so that no library starts a thread there (OpenBLAS's pool,
# the Arrow allocator's background thread); a job gets its own environment and thread limits back.
SERVER_SETTINGS = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
                   "JE_ARROW_MALLOC_CONF": "background_thread:false"}
MAX_FDS = 3
PR_SET_PDEATHSIG = 1


def _recv(sock, size=1 << 20):
    """One message and the descriptors sent with it."""
    fds = array.array("i")
    data, ancdata, _, _ = sock.recvmsg(size, socket.CMSG_SPACE(MAX_FDS * fds.itemsize))
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
    return data, list(fds)


def _read_request(conn):
    """The client's request: a 4-byte length, the JSON header (sent with the 3 standard descriptors), the rest."""
    data, fds = _recv(conn)
    while len(data) < 4:
        more = conn.recv(1 << 20)
        if not more:
            raise EOFError
        data += more
    (size,) = struct.unpack("!I", data[:4])
    data = data[4:]
    while len(data) < size:
        more = conn.recv(1 << 20)
        if not more:
            raise EOFError
        data += more
    return json.loads(data[:size]), fds


def _client_gone(conn):
    """Whether the client closed its end after sending its request."""
    try:
        return conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def _comparable(env):
    return {k: v for k, v in env.items() if k not in JOB_VARIABLES and k not in SHELL_VARIABLES}


def _die_with_parent():
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _thread_count():
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


class Server:
    def __init__(self, path, parent):
        self.path = path
        self.parent = parent
        self.env = _comparable(os.environ)
        self.children = {}  # pid -> (connection, pidfd or None)
        self.selector = None
        self.started = 0
        self.cold = 0
        self.cpu = 0.0  # seconds of CPU of the jobs that ended (logged per job, see reap)
        self.names = {}

    def preload(self, modules=PRELOAD, prepare=PREPARE):
        import importlib

        os.environ.update(SERVER_SETTINGS)  # after self.env was taken: the jobs' environment is compared with that

        for name in modules:
            try:
                importlib.import_module(name)
            except Exception as error:  # an optional library missing: jobs import it themselves
                print(f"zsdr.warm: not preloaded: {name} ({type(error).__name__}: {error})", file=sys.stderr)
        for name, function, *args in prepare:
            if name not in sys.modules:  # not among what this server loads
                continue
            try:
                getattr(sys.modules[name], function)(*args)
            except Exception as error:  # another version of the library: jobs build the cache themselves
                print(f"zsdr.warm: not prepared: {name}.{function} ({type(error).__name__}: {error})",
                      file=sys.stderr)
        gc.collect()
        gc.freeze()  # the loaded modules' objects: out of the collector's way, so children do not copy them

    def serve(self):
        _die_with_parent()
        if os.getppid() != self.parent:
            return 0
        if _thread_count() != 1:
            print(f"zsdr.warm: the loaded libraries started {_thread_count() - 1} thread(s); "
                  "jobs start cold", file=sys.stderr)
            return 1
        if "torch" in sys.modules and sys.modules["torch"].cuda.is_initialized():
            print("zsdr.warm: CUDA was initialised while loading (a fork cannot use it); jobs start cold",
                  file=sys.stderr)
            return 1
        sys.stdout.flush()
        sys.stderr.flush()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(self.path + ".part")
        os.rename(self.path + ".part", self.path)  # clients see the socket once it accepts
        listener.listen(64)
        selector = self.selector = selectors.DefaultSelector()
        selector.register(listener, selectors.EVENT_READ, "listen")
        me = os.getpid()
        try:
            self.loop(listener, selector)
        finally:
            if os.getpid() == me:  # not in a job (a job unwinds through here too)
                print(f"zsdr.warm: {self.started} jobs started warm, {self.cold} cold; "
                      f"the warm jobs' CPU: {self.cpu:.1f} s", file=sys.stderr)
        return 0

    def loop(self, listener, selector):
        while os.getppid() == self.parent:
            for key, _ in selector.select(timeout=1.0 if hasattr(os, "pidfd_open") else 0.1):
                if key.data == "listen":
                    conn, _ = listener.accept()
                    pid = self.start(conn, listener)  # returns in the server only
                    if pid is None:
                        conn.close()
                        continue
                    pidfd = os.pidfd_open(pid) if hasattr(os, "pidfd_open") else None
                    self.children[pid] = (conn, pidfd)
                    selector.register(conn, selectors.EVENT_READ, ("client", pid))
                    if pidfd is not None:  # readable when the child ends: wakes the loop to reap it
                        selector.register(pidfd, selectors.EVENT_READ, ("child", pid))
                elif key.data[0] == "client":  # the client is gone (it only ever waits): so is its job
                    pid = key.data[1]
                    try:
                        key.fileobj.recv(1)
                        os.kill(pid, signal.SIGKILL)
                    except (OSError, ProcessLookupError):
                        pass
                    selector.unregister(key.fileobj)
            self.reap(selector)

    def reap(self, selector):
        for pid in list(self.children):
            done, status, usage = os.wait4(pid, os.WNOHANG)
            if not done:
                continue
            # what each job cost (a local run's CPU per script, beside Snakemake's own)
            cpu = usage.ru_utime + usage.ru_stime
            self.cpu += cpu
            code = os.waitstatus_to_exitcode(status)
            how = f"exit status {code}" if code >= 0 else f"signal {-code}"
            print(f"zsdr.warm: {self.names.pop(pid, '?')} (pid {pid}) ended with {how}: {cpu:.1f} s CPU, "
                  f"{usage.ru_maxrss / 1024:.0f} MB peak resident", file=sys.stderr, flush=True)
            conn, pidfd = self.children.pop(pid)
            for fileobj in (conn, pidfd):
                if fileobj is not None:
                    try:
                        selector.unregister(fileobj)
                    except (KeyError, ValueError):
                        pass
            if pidfd is not None:
                os.close(pidfd)
            try:
                conn.sendall(json.dumps({"status": status}).encode() + b"\n")
            except OSError:
                pass
            conn.close()

    def start(self, conn, listener):
        """Fork the job of one request; the child never returns from here."""
        conn.settimeout(30)  # a client sends its request at once; one that does not cannot hold the server
        try:
            request, fds = _read_request(conn)
        except (OSError, EOFError, ValueError):
            return None
        conn.settimeout(None)
        if _client_gone(conn):  # it gave up waiting (a server that was stopped) and ran the job cold
            for fd in fds:
                os.close(fd)
            return None
        reason = self.refuse(request, fds)
        if reason:
            self.cold += 1
            print(f"zsdr.warm: cold start of {request.get('argv')}: {reason}", file=sys.stderr, flush=True)
            for fd in fds:
                os.close(fd)
            try:
                conn.sendall(json.dumps({"cold": reason}).encode() + b"\n")
            except OSError:
                pass
            return None
        pid = os.fork()
        if pid:
            self.started += 1
            self.names[pid] = _script_name(request.get("argv"))
            for fd in fds:
                os.close(fd)
            try:
                conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
            except OSError:  # the client is gone already: the loop sees its connection closed and ends the job
                pass
            return pid
        # the child: becomes the job; the server's descriptors are not the job's
        listener.close()
        conn.close()
        self.selector.close()
        for other, pidfd in self.children.values():
            other.close()
            if pidfd is not None:
                os.close(pidfd)
        self._become_job(request, fds)

    def refuse(self, request, fds):
        """Why this request cannot run warm (None: it can)."""
        if len(fds) != 3:
            return "the client sent no standard streams"
        if _thread_count() != 1:
            return "the server has threads"
        env = _comparable(request["env"])
        differ = sorted(k for k in set(env) | set(self.env) if env.get(k) != self.env.get(k))
        if differ:
            return "its environment differs from the server's: " + ", ".join(differ[:5])
        return None

    def _become_job(self, request, fds):
        _die_with_parent()
        if os.getppid() == 1:
            os._exit(1)
        for target, fd in enumerate(fds):
            if fd != target:
                os.dup2(fd, target)
                os.close(fd)
        os.umask(request["umask"])
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for name in ("SIGTERM", "SIGHUP", "SIGCHLD", "SIGUSR1", "SIGUSR2", "SIGQUIT", "SIGALRM"):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
        self._job_settings()
        sys.stdin = open(0, "r", closefd=False)
        sys.stdout = open(1, "w", buffering=-1 if not os.isatty(1) else 1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
        import runpy

        argv = request["argv"]
        module = argv[2] if argv[1] == "-m" else None
        script = argv[1]
        try:
            if module is None:
                sys.argv = argv[1:]
                sys.path[0] = os.path.dirname(os.path.abspath(script))
                runpy.run_path(script, run_name="__main__")
            else:  # as `python -m`: the working directory first on the path, the module's file as argv[0]
                sys.argv = ["-m", *argv[3:]]
                sys.path[0] = os.getcwd()
                runpy.run_module(module, run_name="__main__", alter_sys=True)
        except Exception as error:  # as Python reports an uncaught exception: from the job's own frames on
            tb = error.__traceback__
            if module is None:
                while tb is not None and tb.tb_frame.f_code.co_filename != script:
                    tb = tb.tb_next
            else:
                while tb is not None and tb.tb_frame.f_code.co_filename in (__file__, runpy.__file__):
                    tb = tb.tb_next
            error.__traceback__ = tb or error.__traceback__  # what the default hook prints
            sys.excepthook(type(error), error, error.__traceback__)
            raise SystemExit(1) from None
        raise SystemExit(0)  # unwinds to the interpreter's own exit: atexit, non-daemon threads, flushing

    def _job_settings(self):
        import tempfile

        tempfile.tempdir = None  # a job's TMPDIR
        threads = os.environ.get("OMP_NUM_THREADS")
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()  # as a new process: from the OS's entropy
        if "torch" in sys.modules:
            torch = sys.modules["torch"]
            torch.seed()  # as a new process: a seed of its own
            if threads:
                torch.set_num_threads(int(threads))
        if threads:
            try:
                from threadpoolctl import threadpool_limits

                threadpool_limits(int(threads))  # BLAS and OpenMP libraries loaded by the server
            except ImportError:
                pass


def _stop(*_):
    raise SystemExit(0)


def serve(path, parent, preload=PRELOAD):
    server = Server(path, parent)
    server.preload(preload)
    me = os.getpid()

    def cleanup():  # the socket and its private folder (start_server made it for this server alone)
        if os.getpid() == me:
            for stale in (path, path + ".part"):
                try:
                    os.unlink(stale)
                except FileNotFoundError:
                    pass
            try:
                os.rmdir(os.path.dirname(path))
            except OSError:
                pass

    import atexit

    atexit.register(cleanup)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the jobs; the run ends the server
    signal.signal(signal.SIGTERM, _stop)
    return server.serve()


# The server costs about one job's imports (~4 s of CPU): a run of fewer Python jobs starts them cold.
MIN_JOBS = 4


# Libraries of a few job kinds only, loaded by the server when a run has at least two such jobs (each job
# would import them itself: ranx and numba cost ~2.3 s of CPU per evaluation job).
SCRIPT_PRELOAD = {"evaluate.py": ("numba", "numba.typed", "ranx")}


def unlimit_local_starts(workflow) -> bool:
    """Lift Snakemake's limit on job starts for a local run (whether it was lifted).

    The limit (--max-jobs-per-timespan, 100/1s by default) is for a cluster's submissions. With it, each
    scheduling round that leaves ready jobs waiting for a core schedules another round one second later, and
    every such round starts a chain of its own: late in a mini run of ~110 jobs on 2 cores Snakemake runs
    ~50 rounds a second, each re-reading the sizes of every waiting job's inputs. Only the default is lifted
    (a limit given on the command line or in a profile stays); a Snakemake whose scheduler has no such
    limiter is left as it is."""
    limiter = getattr(getattr(workflow, "scheduler", None), "job_rate_limiter", None)
    if limiter is None or (getattr(limiter, "max_jobs", None), getattr(limiter, "timespan", None)) != (100, 1):
        return False
    workflow.scheduler.job_rate_limiter = None
    return True


def preload_for(workflow, preload=PRELOAD):
    """``preload`` and the :data:`SCRIPT_PRELOAD` modules of every script the run has at least two jobs of."""
    try:
        scripts = [os.path.basename(str(job.rule.script)) for job in workflow.dag.needrun_jobs() if job.is_script]
    except Exception:
        return tuple(preload)
    extra = [m for script, modules in SCRIPT_PRELOAD.items() if scripts.count(script) >= 2 for m in modules]
    return tuple(dict.fromkeys([*preload, *extra]))


def worth_starting(workflow):
    """Whether the run about to start has at least MIN_JOBS Python script jobs (yes when its DAG cannot be read)."""
    try:
        jobs = sum(1 for job in workflow.dag.needrun_jobs() if job.is_script and str(job.rule.script).endswith(".py"))
    except Exception:
        return True
    return jobs >= MIN_JOBS


def _script_name(argv) -> str:
    """A job's script as the log names it: Snakemake's copy ``.snakemake/scripts/tmpXXXX.train.py`` is
    ``train.py``."""
    try:
        if argv[1] == "-m":
            return f"-m {argv[2]}"
        name = os.path.basename(str(argv[1]))
    except (TypeError, IndexError):
        return "?"
    return name.split(".", 1)[1] if name.startswith("tmp") and name.count(".") >= 2 else name


FOLDER_PREFIX = "zsdr-warm-"
"""The socket's private folder: ``zsdr-warm-<pid of the Snakemake process>-<random>`` in the temporary folder."""


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process
        return True
    return True


def _stale(path):
    """Whether a socket folder belongs to no running server: the Snakemake process named in it is gone (a
    folder of an earlier version, without a pid: nothing listens on its socket)."""
    rest = os.path.basename(path)[len(FOLDER_PREFIX):]
    pid = rest.split("-", 1)[0]
    if pid.isdigit() and "-" in rest:
        return not _alive(int(pid))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(os.path.join(path, "socket"))
    except FileNotFoundError:
        return time.time() - os.stat(path).st_mtime > 3600  # not bound an hour after it was made
    except OSError:
        return True  # refused: no server behind it
    finally:
        sock.close()
    return False


def remove_stale_folders(tmpdir):
    """Remove this user's socket folders whose server is gone: Snakemake killed (SIGKILL) takes its server
    with it before either can remove the folder; the next run's start clears them."""
    import shutil

    try:
        entries = list(os.scandir(tmpdir))
    except OSError:
        return []
    removed = []
    for entry in entries:
        try:
            if (not entry.name.startswith(FOLDER_PREFIX) or not entry.is_dir(follow_symlinks=False)
                    or entry.stat(follow_symlinks=False).st_uid != os.getuid() or not _stale(entry.path)):
                continue
        except OSError:
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(entry.path)
    return removed


def start_server(shell, client, log=".snakemake/warm.log", preload=PRELOAD):
    """Start the server for a local run (the Snakefile's onstart) and route Python jobs through `client`.

    The socket lies in a private temporary folder (0700: only this user can start jobs through it), named
    after this process; the folders of runs that were killed are removed first. The server's own messages
    go to `log`. Jobs that start before the server has loaded run cold.
    """
    import shlex
    import subprocess
    import tempfile

    if not sys.platform.startswith("linux"):
        return {}
    remove_stale_folders(tempfile.gettempdir())
    folder = tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-")
    path = os.path.join(folder, "socket")
    os.environ.update(ZSDR_WARM_SOCKET=path, ZSDR_WARM_PYTHON=sys.executable)
    os.makedirs(os.path.dirname(log) or ".", exist_ok=True)
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "zsdr.warm", "serve", path, str(os.getpid()), ",".join(preload)],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=out)
    # Snakemake runs a script job as `<python> <script>` after this prefix (its default is the first part)
    command = shlex.join([sys.executable, "-I", "-S", str(client)])
    shell.prefix("set -euo pipefail; " + command.replace("{", "{{").replace("}", "}}") + " ")
    return {"process": proc, "folder": folder, "shell": shell}


def stop_server(warm):
    """End the server (the Snakefile's onsuccess / onerror)."""
    import shutil

    if not warm:
        return
    warm["shell"].prefix("set -euo pipefail; ")
    proc = warm["process"]
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except Exception:
            proc.kill()
    shutil.rmtree(warm["folder"], ignore_errors=True)
    for name in ("ZSDR_WARM_SOCKET", "ZSDR_WARM_PYTHON"):
        os.environ.pop(name, None)
    warm.clear()


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 3 and argv[0] == "serve":
        return serve(argv[1], int(argv[2]))
    if len(argv) == 4 and argv[0] == "serve":
        return serve(argv[1], int(argv[2]), [name for name in argv[3].split(",") if name])
    print("usage: python -m zsdr.warm serve SOCKET PARENT_PID [MODULE,MODULE,...]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())

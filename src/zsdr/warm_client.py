"""The client side of zsdr.warm: runs `python <script>` (or `python -m <module>`) in a child of the warm server,
or execs it.

    python -I -S warm_client.py PYTHON SCRIPT [ARGS...]
    python -I -S warm_client.py PYTHON -m MODULE [ARGS...]

Standard library only, started isolated (-I -S) so that it costs a few milliseconds. Without a server
(ZSDR_WARM_SOCKET unset or not there), for another interpreter than the server's (ZSDR_WARM_PYTHON) or
any other command, and when the server declines, it replaces itself with the command (exec): the job
then runs exactly as it would without zsdr.warm.

A server that does not answer within ZSDR_WARM_TIMEOUT seconds (default 20; a stopped or hung server)
is given up: the job runs cold. A signal that arrives before the job has started ends the client (the
server ends a job whose client is gone); afterwards it is forwarded to the job. Once the job has ended,
a server that does not report its status within that time fails the job (exit status 1) rather than
keep the client waiting.
"""

import array
import json
import os
import select
import signal
import socket
import struct
import sys

FORWARDED = ("SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM")
TIMEOUT = 20.0


def cold(argv):
    os.execvp(argv[0], argv)


def _timeout():
    try:
        return max(0.1, float(os.environ.get("ZSDR_WARM_TIMEOUT") or TIMEOUT))
    except ValueError:
        return TIMEOUT


class _Lines:
    """Newline-terminated messages from the server's socket, each read with an optional time limit."""

    def __init__(self, sock):
        self.sock, self.buffer = sock, b""

    def ready(self):
        return b"\n" in self.buffer

    def read(self, timeout=None):
        """The next line, b"" when the server closed the connection; raises TimeoutError."""
        while b"\n" not in self.buffer:
            if timeout is not None and not select.select([self.sock], [], [], timeout)[0]:
                raise TimeoutError
            data = self.sock.recv(1 << 16)
            if not data:
                return b""
            self.buffer += data
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line + b"\n"


def warm(argv, path):
    timeout = _timeout()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
    except OSError:
        return None
    child = []

    def forward(signum, _frame):
        if child:
            try:
                os.kill(child[0], signum)
            except ProcessLookupError:
                pass
            return
        # No job yet: end here, of the signal (the server ends a job whose client is gone).
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    for name in FORWARDED:
        signal.signal(getattr(signal, name), forward)
    # Ctrl-C reaches the child directly (one process group); the client waits for the child's status.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    umask = os.umask(0)
    os.umask(umask)
    header = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ), "umask": umask}).encode()
    fds = array.array("i", [0, 1, 2])
    message = struct.pack("!I", len(header)) + header
    lines = _Lines(sock)
    try:
        sock.sendmsg([message[:4096]], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
        if len(message) > 4096:
            sock.sendall(message[4096:])
        reply = json.loads(lines.read(timeout) or b"{}")
    except (OSError, ValueError):  # TimeoutError is an OSError: a server that does not answer
        reply = {}
    if "pid" not in reply:
        for name in FORWARDED:
            signal.signal(getattr(signal, name), signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sock.close()  # a server that answers later sees the client gone and ends what it started
        return None  # declined (reply["cold"] says why) or no answer: run cold
    child.append(reply["pid"])
    sock.settimeout(None)
    line = _status(lines, child[0], timeout, argv)
    if line is None:
        return 1
    if not line:
        print(f"warm_client: the warm server is gone; job {argv[1]} (pid {child[0]}) was killed with it",
              file=sys.stderr)
        return 1
    code = os.waitstatus_to_exitcode(json.loads(line)["status"])
    if code < 0:  # killed by a signal: so is this process, for the shell and Snakemake to see
        signal.signal(-code, signal.SIG_DFL)
        sys.stdout.flush()
        os.kill(os.getpid(), -code)
        return 128 - code
    return code


def _status(lines, pid, timeout, argv):
    """The server's status line for job ``pid`` (b"" if the server closed the connection); None when the
    job has ended and the server does not report it within ``timeout`` seconds (a stopped server)."""
    ended = False
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:  # the job has ended already
        pidfd, ended = None, True
    except (AttributeError, OSError):  # no pidfd on this system: the server's word only
        pidfd = None
    try:
        while not lines.ready():
            if not ended:
                watched = [lines.sock] + ([pidfd] if pidfd is not None else [])
                if lines.sock in select.select(watched, [], [])[0]:
                    return lines.read()
            try:  # the job has ended: its status follows at once, from a server that runs
                return lines.read(timeout)
            except TimeoutError:
                print(f"warm_client: job {argv[1]} (pid {pid}) ended but the warm server did not report its "
                      f"exit status within {timeout:g} s (a stopped server?); failing the job", file=sys.stderr)
                return None
        return lines.read()
    finally:
        if pidfd is not None:
            os.close(pidfd)


def runs_python(argv):
    """Whether ``argv`` is `PYTHON SCRIPT.py [ARGS]` or `PYTHON -m MODULE [ARGS]` (no interpreter options)."""
    return len(argv) >= 2 and (argv[1].endswith(".py") or (argv[1] == "-m" and len(argv) >= 3))


def main():
    argv = sys.argv[1:]
    path = os.environ.get("ZSDR_WARM_SOCKET")
    python = os.environ.get("ZSDR_WARM_PYTHON")
    if (path and python and runs_python(argv) and os.path.exists(path)
            and os.path.realpath(argv[0]) == os.path.realpath(python)):
        code = warm(argv, path)
        if code is not None:
            return code
    cold(argv)


if __name__ == "__main__":
    sys.exit(main())

"""The client side of zsdr.warm: runs `python <script>` in a child of the warm server, or execs it.

    python -I -S warm_client.py PYTHON SCRIPT

Standard library only, started isolated (-I -S) so that it costs a few milliseconds. Without a server
(ZSDR_WARM_SOCKET unset or not there), for another interpreter than the server's (ZSDR_WARM_PYTHON) or
any other command, and when the server declines, it replaces itself with the command (exec): the job
then runs exactly as it would without zsdr.warm.
"""

import array
import json
import os
import signal
import socket
import struct
import sys

FORWARDED = ("SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM")


def cold(argv):
    os.execvp(argv[0], argv)


def warm(argv, path):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError:
        return None
    pending, child = [], []

    def forward(signum, _frame):
        if child:
            try:
                os.kill(child[0], signum)
            except ProcessLookupError:
                pass
        else:
            pending.append(signum)

    for name in FORWARDED:
        signal.signal(getattr(signal, name), forward)
    # Ctrl-C reaches the child directly (one process group); the client waits for the child's status.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    umask = os.umask(0)
    os.umask(umask)
    header = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ), "umask": umask}).encode()
    fds = array.array("i", [0, 1, 2])
    message = struct.pack("!I", len(header)) + header
    try:
        sock.sendmsg([message[:4096]], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
        if len(message) > 4096:
            sock.sendall(message[4096:])
        reader = sock.makefile("rb")
        reply = json.loads(reader.readline() or b"{}")
    except (OSError, ValueError):
        reply = {}
    if "pid" not in reply:
        for name in FORWARDED:
            signal.signal(getattr(signal, name), signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        return None  # declined (reply["cold"] says why) or no answer: run cold
    child.append(reply["pid"])
    for signum in pending:
        forward(signum, None)
    line = reader.readline()
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


def main():
    argv = sys.argv[1:]
    path = os.environ.get("ZSDR_WARM_SOCKET")
    python = os.environ.get("ZSDR_WARM_PYTHON")
    if (path and python and len(argv) == 2 and argv[1].endswith(".py") and os.path.exists(path)
            and os.path.realpath(argv[0]) == os.path.realpath(python)):
        code = warm(argv, path)
        if code is not None:
            return code
    cold(argv)


if __name__ == "__main__":
    sys.exit(main())

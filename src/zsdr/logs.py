"""Logging set-up shared by the CLI and the workflow scripts."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path


def setup_logging(log_file: str | os.PathLike | None = None, level: int = logging.INFO) -> None:
    """Log to stderr or, when given, to ``log_file`` (a Snakemake job's ``log:``); warnings included.

    With ``log_file`` the job is quiet on the console: everything it writes (its log records, library
    messages and progress bars, the output of processes it starts) goes to the file, and the console
    (Snakemake's output) gets only the project's warnings and errors and, when the job fails, the
    error's last line with the log's path (the traceback is in the log).
    """
    if not log_file:
        logging.basicConfig(level=level, format=FORMAT, handlers=[logging.StreamHandler(sys.stderr)], force=True)
        logging.captureWarnings(True)
        return
    path = Path(log_file)
    path.parent.mkdir(parents=True, exist_ok=True)
    console = os.fdopen(os.dup(sys.stderr.fileno()), "w", buffering=1, encoding="utf-8", errors="replace")
    path.write_text("", encoding="utf-8")
    # Append mode: processes this job starts (torchrun, Java) write to the same file at its end.
    with open(path, "a", encoding="utf-8") as fh:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(fh.fileno(), sys.stdout.fileno())
        os.dup2(fh.fileno(), sys.stderr.fileno())
    to_console = logging.StreamHandler(console)
    to_console.setLevel(logging.WARNING)
    to_console.addFilter(lambda record: record.name.split(".")[0] == "zsdr")
    logging.basicConfig(level=level, format=FORMAT, handlers=[logging.StreamHandler(sys.stderr), to_console],
                        force=True)
    logging.captureWarnings(True)

    def report(kind, value, tb):
        sys.__excepthook__(kind, value, tb)
        sys.stderr.flush()
        if not issubclass(kind, KeyboardInterrupt):
            console.write(f"{kind.__name__}: {value} (traceback in {path})\n")

    sys.excepthook = report


FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

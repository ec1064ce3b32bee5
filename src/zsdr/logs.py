"""Logging set-up shared by the CLI and the workflow scripts."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path


def setup_logging(log_file: str | os.PathLike | None = None, level: int = logging.INFO) -> None:
    """Log to stderr and, when given, to ``log_file`` (a Snakemake job's ``log:``); warnings included."""
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_file:
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(log_file, mode="w", encoding="utf-8"))
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        handlers=handlers, force=True)
    logging.captureWarnings(True)

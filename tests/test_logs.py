"""A workflow job's output: everything in its log file, only warnings and a failure's last line on the console."""

import subprocess
import sys
import textwrap


def run_job(tmp_path, body: str) -> tuple[subprocess.CompletedProcess, str]:
    log = tmp_path / "logs" / "job.log"
    script = textwrap.dedent(f"""
        import logging, subprocess, sys
        from zsdr.logs import setup_logging
        setup_logging({str(log)!r})
        logging.getLogger("zsdr.retrieval.encode").info("shard 0/1: 1200 docs in 0.6 s")
        logging.getLogger("transformers.modeling_utils").warning("LOAD REPORT from a library")
        print("a progress bar", file=sys.stderr, flush=True)
        print("a print", flush=True)
        subprocess.run([sys.executable, "-c", "import sys; print('from a child process', file=sys.stderr)"])
        logging.getLogger("zsdr.training").warning("the project's own warning")
    """) + textwrap.dedent(body)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    return proc, log.read_text()


def test_a_job_writes_its_details_to_the_log_and_only_warnings_to_the_console(tmp_path):
    proc, log = run_job(tmp_path, "")
    assert proc.returncode == 0
    console = proc.stdout + proc.stderr
    assert console.strip().splitlines() == [l for l in console.strip().splitlines() if "the project's own warning" in l]
    assert len(console.strip().splitlines()) == 1
    for line in ("shard 0/1: 1200 docs", "LOAD REPORT from a library", "a progress bar", "a print",
                 "from a child process", "the project's own warning"):
        assert line in log, line


def test_a_failed_job_prints_the_error_and_the_log_path_and_logs_the_traceback(tmp_path):
    proc, log = run_job(tmp_path, """
        from zsdr.io import DataError
        raise DataError("data/x/corpus.jsonl", 3, "line 3 is not JSON", "fix the line")
    """)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("DataError: ") and "corpus.jsonl" in last and str(tmp_path / "logs" / "job.log") in last
    assert "Traceback (most recent call last)" in log and "Traceback" not in proc.stderr

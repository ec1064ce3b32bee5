"""The commands of README.md and docs/ run as written.

Every command of a ```bash, ```sh or ```console block (in a console block, the lines that start with
``$ ``; a line ending in ``\\`` continues on the next) runs in a fresh copy of the workflow, one copy
per page, in the order the page gives them:

* ``snakemake`` commands run as dry runs: ``-n`` is appended unless the command has it already. The
  one exception is the mini ``data`` target (``snakemake ... data`` with no ``--configfile``): it runs
  for real, in about 20 s, because the commands after it on its page read the files it writes.
* every other command runs exactly as written (``bash -c``), with ``.venv/bin`` first on ``PATH``.
* a command matching an entry of :data:`SKIP` is not run; each entry says why, and every entry must
  still match a command somewhere (a stale entry fails :func:`test_every_skip_is_still_needed`).

A command that exits non-zero fails the test, with its output, and so does a comment showing a
command's JSON output (``# {"ndcg@10": 0.8174, ...}``) that disagrees with it. A dry run that Snakemake has already
planned with the same arguments (in any order) is not planned again.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
COPIED = ("Snakefile", "config.yaml", "configs", "rules", "workflow_scripts", "schemas", "src", "profiles", "envs",
          "report", "docs", "Makefile", "pyproject.toml")
FENCE = re.compile(r"^```(bash|sh|console)\s*$")

# (pattern searched in the command without its comment, why the command is not run here)
SKIP: list[tuple[str, str]] = [
    (r"^make run$", "the whole mini pipeline (~18 min; tests/test_mini_run.py runs it); the README's dry run of "
                    "`snakemake --cores all results/table1.csv` checks the command it runs"),
    (r"\bmake test(-full)?$", "the test suite this test belongs to"),
    (r"^make install-gpu$", "installs faiss-gpu: for a CUDA machine"),
    (r"^make lint$", "reinstalls the dev extras into .venv; tests/test_workflow.py runs the same lint and snakefmt "
                     "checks"),
    (r"^\.venv/bin/pytest\b", "a test module, which the test suite runs itself"),
    (r"\bzsdr fetch\b|data/(scifact|msmarco)\b", "downloads a dataset from the internet (or reads one downloaded)"),
    (r"^\.venv/bin/snakemake (-n )?--profile profiles/slurm results/all --configfile configs/paper\.yaml$",
     "submits every paper job to SLURM; tests/test_workflow.py makes exactly this plan (-n, ~40 s of CPU)"),
    (r"\bzsdr (train|mine|score-pairs|export)\b", "reads a training's spec, models or embeddings: outputs of `make run`"),
    (r"^/path/to/zsdr/\.venv/bin/snakemake ", "runs in the folder of your own workflow, whose Snakefile imports zsdr "
                                              "as a module; tests/test_elsewhere.py plans such a workflow"),
    (r"^(sbatch|squeue) ", "talks to a SLURM cluster (the controller job and its run's jobs); tests/test_slurm.py "
                           "runs the profile on a real one"),
]


@dataclass
class Command:
    page: Path
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}: {self.text}"

    @property
    def bare(self) -> str:
        """The command without its comment, as the shell reads its words."""
        return " ".join(shlex.split(self.text, comments=True))


def commands(page: Path) -> list[Command]:
    """The commands of the page's bash / sh / console blocks, continuation lines joined."""
    found: list[Command] = []
    kind, pending, start = None, "", 0
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if kind is None:
            m = FENCE.match(line)
            kind = m.group(1) if m else None
            continue
        if line.startswith("```"):
            if pending:
                raise AssertionError(f"{page.relative_to(ROOT)}:{start}: a block ends after a continuation line")
            kind = None
            continue
        if not pending:
            if kind == "console":
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            start = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        found.append(Command(page, start, (pending + line).strip()))
        pending = ""
    return found


def skip_reason(command: Command) -> str | None:
    for pattern, reason in SKIP:
        if re.search(pattern, command.bare):
            return reason
    return None


def _tokens(command: Command) -> list[str]:
    return shlex.split(command.text, comments=True)


def as_run(command: Command) -> tuple[str, bool]:
    """(the shell line to run, whether it is a dry run)."""
    tokens = _tokens(command)
    if not tokens or Path(tokens[0]).name != "snakemake":
        return command.text, False
    if "-n" in tokens or "--dry-run" in tokens:
        return shlex.join(tokens), True
    if "data" in tokens and not any(t.startswith("--configfile") for t in tokens):
        return shlex.join(tokens), False   # the mini data target: later commands read its files
    return shlex.join([*tokens, "-n"]), True


def workflow_copy(where: Path) -> Path:
    where.mkdir(parents=True)
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, where / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif source.exists():
            shutil.copy(source, where / name)
    (where / ".venv").symlink_to(BIN.parent, target_is_directory=True)
    return where


def run(line: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "NUMBA_CACHE_DIR": str(ROOT / ".cache" / "numba"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


_PLANNED: set[tuple[str, ...]] = set()
FIGURE = re.compile(r'"([\w@.-]+)": (\d+(?:\.\d+)?)')


def wrong_figures(command: Command, stdout: str) -> list[str]:
    """A comment that shows the command's JSON output (``# {"ndcg@10": 0.8174, ...}``) must agree with
    what the command prints, to the digits the comment gives."""
    comment = re.search(r"\s#\s*(\{.*)$", command.text)
    if not comment:
        return []
    printed = json.loads(stdout[stdout.index("{"):])
    wrong = []
    for name, shown in FIGURE.findall(comment.group(1)):
        digits = len(shown.split(".")[1]) if "." in shown else 0
        if name not in printed or round(float(printed[name]), digits) != float(shown):
            wrong.append(f"the comment shows {name} {shown}, the command printed {printed.get(name)}")
    return wrong


WITH_COMMANDS = [page for page in PAGES if commands(page)]


@pytest.mark.parametrize("page", WITH_COMMANDS, ids=[str(p.relative_to(ROOT)) for p in WITH_COMMANDS])
def test_page_commands_run_as_written(page, tmp_path):
    todo = commands(page)
    copy = None
    failures = []
    for command in todo:
        if skip_reason(command):
            continue
        line, dry = as_run(command)
        key = tuple(sorted(shlex.split(line))) if dry else None
        if key in _PLANNED:
            continue
        copy = copy or workflow_copy(tmp_path / "work")
        proc = run(line, copy)
        if proc.returncode != 0:
            failures.append(f"{command}\n  ran: {line}\n  exit {proc.returncode}\n"
                            f"{(proc.stdout + proc.stderr)[-3000:]}")
        elif key is not None:
            _PLANNED.add(key)
        else:
            failures += [f"{command}\n  {wrong}" for wrong in wrong_figures(command, proc.stdout)]
    assert not failures, "commands that do not run as written:\n\n" + "\n\n".join(failures)


def test_readme_commands_cover_every_scale():
    """The README shows the two set-up commands first, and a command for each scale that is checked."""
    readme = commands(ROOT / "README.md")
    assert [c.bare for c in readme[:2]] == ["make run", "make test"]
    checked = [c for c in readme if not skip_reason(c)]
    for scale in ("configs/small.yaml", "configs/paper.yaml"):
        assert any(scale in c.text for c in checked), scale
    assert any("--configfile" not in c.text and "results/table1.csv" in c.text for c in checked)


def test_every_skip_is_still_needed():
    every = [c for page in PAGES for c in commands(page)]
    for pattern, reason in SKIP:
        assert any(re.search(pattern, c.bare) for c in every), f"SKIP entry {pattern!r} ({reason}) matches nothing"


def test_a_target_after_a_several_valued_option_fails(tmp_path):
    """The checks can fail: --configfile and --resources take several values and swallow a target after them
    (the two mistakes the README once made)."""
    page = tmp_path / "page.md"
    page.write_text("```bash\n"
                    ".venv/bin/snakemake --cores all --configfile configs/paper.yaml data  # fetch\n"
                    ".venv/bin/snakemake --cores all --resources gpu=1 results/table1.csv \\\n"
                    "    --configfile configs/small.yaml\n"
                    "```\n")
    copy = workflow_copy(tmp_path / "work")
    swallowed, resource = commands(page)
    line, dry = as_run(swallowed)
    assert dry and line.endswith(" -n")
    proc = run(line, copy)
    assert proc.returncode != 0 and "'data'" in proc.stdout + proc.stderr
    line, dry = as_run(resource)
    assert dry and run(line, copy).returncode != 0


def test_block_parsing(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("text\n```bash\n# a comment\nzsdr a \\\n    --b c   # note\n\nmake run\n```\n"
                    "```python\nprint(1)\n```\n```console\n$ zsdr d\noutput line\n```\n")
    found = commands(page)
    assert [(c.line, c.text) for c in found] == [(4, "zsdr a      --b c   # note"), (7, "make run"), (13, "zsdr d")]
    assert skip_reason(found[1]) and not skip_reason(found[0])
    assert as_run(Command(page, 1, ".venv/bin/snakemake --cores all results/table1.csv  # mini"))[0] \
        == ".venv/bin/snakemake --cores all results/table1.csv -n"
    assert as_run(Command(page, 1, ".venv/bin/snakemake --cores all data")) == (".venv/bin/snakemake --cores all data",
                                                                                False)


def test_a_figure_in_a_comment_must_match_the_output(tmp_path):
    page = tmp_path / "page.md"
    command = Command(page, 1, 'zsdr evaluate --run x  # {"ndcg@10": 0.8174, ...}')
    assert wrong_figures(command, '{"ndcg@10": 0.81739663, "recall@100": 1.0}\n') == []
    assert wrong_figures(command, 'log line\n{"ndcg@10": 0.8175}\n')
    assert wrong_figures(Command(page, 1, "zsdr stats x  # counts"), "not json") == []

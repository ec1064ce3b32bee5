"""The commands of README.md, docs/ and the files' own comments run as written.

The commands are those of every page of README.md and docs/ (docs/*.md, docs/*/*.md) — every command of
a ```bash, ```sh or ```console block (in a console block, the lines that start with ``$ ``; a line
ending in ``\\`` continues on the next), and every inline ``snakemake ...`` code span of its prose (run
as a dry run) — and those of the comments of the files a user opens first: the header comments of
config.yaml, configs/ and profiles/ files and of the Makefile (a comment line indented like code,
``#   snakemake ...``), and the Snakefile's docstring. Each source's commands run in a fresh copy of the
workflow, one copy per source, in the order the source gives them:

* ``snakemake`` commands run as dry runs: ``-n`` is appended unless the command has it already. The
  one exception is the mini ``data`` target (``snakemake ... data`` with no ``--configfile``): it runs
  for real, in about 20 s, because the commands after it on its page read the files it writes. They run
  as the environment's ``python -m snakemake`` with the same arguments, forked from a server of the tests
  that has Snakemake loaded (tests/warm_jobs.py).
* every other command runs exactly as written (``bash -c``), with ``.venv/bin`` first on ``PATH``.
* a command matching an entry of :data:`SKIP` is not run; each entry says why, and every entry must
  still match a command somewhere (a stale entry fails :func:`test_every_skip_is_still_needed`).

A command that exits non-zero fails the test, with its output, and so does a dry run that prints an
exception, a traceback or a warning, and a comment showing a command's JSON output (``# {"ndcg@10":
0.8174, ...}``) that disagrees with it. A dry run that Snakemake has already planned with the same
arguments (in any order, however the program is named) is not planned again.
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

from tests.test_workflow import NOISE, snakemake
from tests.warm_jobs import job_env
from zsdr.data import registry

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs").glob("*/*.md"))]
COMMENTED = [ROOT / "Snakefile", ROOT / "Makefile", ROOT / "config.yaml", *sorted((ROOT / "configs").rglob("*.yaml")),
             *sorted((ROOT / "profiles").rglob("*.yaml"))]
SOURCES = PAGES + COMMENTED
COPIED = ("Snakefile", "config.yaml", "configs", "rules", "workflow_scripts", "schemas", "src", "profiles", "envs",
          "report", "docs", "Makefile", "pyproject.toml")
FENCE = re.compile(r"^```(bash|sh|console)\s*$")
INLINE = re.compile(r"`((?:\.venv/bin/)?snakemake\s[^`]+)`")
# a command in a comment: indented like code after the `#`, optional VAR=value words, then a program
PROGRAM = r"(?:[A-Z_]+=\S+\s+)*(?:\.venv/bin/\S+|snakemake|zsdr|make|python)\b"
COMMENT_COMMAND = re.compile(rf"^#\s{{2,}}({PROGRAM}.*)$")
DOCSTRING_COMMAND = re.compile(rf"^({PROGRAM}.*)$")

# (pattern searched in the command without its comment, why the command is not run here)
SKIP: list[tuple[str, str]] = [
    (r"^make run$", "the whole mini pipeline (~18 min; tests/test_mini_run.py runs it); the README's dry run of "
                    "`snakemake --cores all results/table1.csv` checks the command it runs"),
    (r"\bmake test(-full)?$", "the test suite this test belongs to"),
    (r"^make install-gpu$", "installs faiss-gpu: for a CUDA machine"),
    (r"^make lint$", "reinstalls the dev extras into .venv; tests/test_workflow.py runs the same lint and snakefmt "
                     "checks"),
    (r"^\.venv/bin/pytest\b", "a test module, which the test suite runs itself"),
    (r"^ZSDR_ACCEPTANCE=1 \.venv/bin/pytest\b", "the opt-in acceptance runs of a test module (minutes on real data)"),
    (r"\bzsdr fetch\b|data/(scifact|msmarco)\b", "downloads a dataset from the internet (or reads one downloaded)"),
    (r"^(\.venv/bin/)?snakemake (-n )?--profile profiles/slurm paper/results/all --configfile configs/paper\.yaml$",
     "submits every paper job to SLURM; tests/test_workflow.py makes exactly this plan (-n, ~40 s of CPU)"),
    (r"^TORCH_INDEX=https://\S+ make install$", "downloads torch from the internet"),
    (r"^make lock$", "resolves every package against the package indexes (~45 s, the network); "
                     "tests/test_packaging.py checks the locks it writes"),
    (r"\bzsdr (train|mine|score-pairs|export)\b", "reads a training's spec, models or embeddings: outputs of `make run`"),
    (r"\bsnakemake --report\b", "bundles the outputs of a finished run: tests/test_mini_run.py makes the report "
                                 "of table 1 after its run, and that of `tables` after the whole mini DAG "
                                 "(make test-full)"),
    (r"^/path/to/zsdr/\.venv/bin/snakemake ", "runs in the folder of your own workflow, whose Snakefile imports zsdr "
                                              "as a module; tests/test_elsewhere.py plans such a workflow"),
    (r"--configfile my-lab\.yaml$", "the reader's own files (my-lab.yaml, my-collection/, my-encoder/): "
                                      "tests/test_extending.py plans that section of docs/extending.md as written"),
    (r"^(sbatch|squeue) ", "talks to a SLURM cluster (the controller job and its run's jobs); tests/test_slurm.py "
                           "runs the profile on a real one"),
]


@dataclass
class Command:
    page: Path
    line: int
    text: str
    inline: bool = False   # a code span of a page's prose: always a dry run

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}: {self.text}"

    @property
    def bare(self) -> str:
        """The command without its comment, as the shell reads its words."""
        return " ".join(shlex.split(self.text, comments=True))


def commands(page: Path) -> list[Command]:
    """The commands of a source: a page's blocks and inline spans, or a file's comments, in line order."""
    if page.suffix != ".md":
        return comment_commands(page)
    return sorted(block_commands(page) + inline_commands(page), key=lambda c: c.line)


def inline_commands(page: Path) -> list[Command]:
    """The ``snakemake ...`` code spans of a page's prose (outside its fenced blocks; a span may wrap)."""
    prose, fenced = [], False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
            line = ""
        prose.append("" if fenced else line)
    text = "\n".join(prose)
    return [Command(page, text.count("\n", 0, m.start()) + 1, " ".join(m.group(1).split()), inline=True)
            for m in INLINE.finditer(text)]


def comment_commands(path: Path) -> list[Command]:
    """The commands of a file's comments: code-indented ``#`` lines, and the Snakefile's docstring lines."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found = [Command(path, n, m.group(1).strip()) for n, line in enumerate(lines, 1)
             if (m := COMMENT_COMMAND.match(line))]
    if path.name == "Snakefile" and lines and lines[0].startswith('"""'):
        end = next(i for i, line in enumerate(lines[1:], 1) if '"""' in line)
        found += [Command(path, n + 1, m.group(1).strip()) for n, line in enumerate(lines[1:end], 1)
                  if (m := DOCSTRING_COMMAND.match(line))]
    return sorted(found, key=lambda c: c.line)


def block_commands(page: Path) -> list[Command]:
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
    if "data" in tokens and not command.inline and not any(t.startswith("--configfile") for t in tokens):
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
    add_licensed_sets(where / "byo")
    return where


def add_licensed_sets(byo: Path) -> None:
    """The four licensed BEIR sets as a site that built them has them (one document, one query, one judgement
    each): without them a paper-scale plan stops at the first it needs (config datasets.missing), and the
    documented paper-scale commands are those of such a site."""
    for dataset in registry.DATASETS:
        if dataset.public:
            continue
        (byo / dataset.name / "qrels").mkdir(parents=True)
        (byo / dataset.name / "corpus.jsonl").write_text('{"_id": "d1", "title": "", "text": "a document"}\n')
        (byo / dataset.name / "queries.jsonl").write_text('{"_id": "q1", "text": "a query"}\n')
        (byo / dataset.name / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")


def run(line: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    extra = {"PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "NUMBA_CACHE_DIR": str(ROOT / ".cache" / "numba"),
             "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    tokens = shlex.split(line)
    if tokens and Path(tokens[0]).name == "snakemake" and shlex.join(tokens) == line:
        # a Snakemake command (as_run's line): the environment's Snakemake as `python -m snakemake`, forked from
        # the tests' warm server with Snakemake loaded (tests/test_workflow.py's snakemake)
        return snakemake(*tokens[1:], cwd=cwd, timeout=timeout, check=False, env=extra)
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=job_env(extra), capture_output=True, text=True,
                          timeout=timeout)


_PLANNED: set[tuple[str, ...]] = set()


def plan_key(line: str) -> tuple[str, ...]:
    """What a dry run plans: its arguments in any order, `snakemake` however the program is named."""
    program, *args = shlex.split(line)
    return (Path(program).name, *sorted(args))
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


WITH_COMMANDS = [page for page in SOURCES if commands(page)]


@pytest.mark.parametrize("page", WITH_COMMANDS, ids=[str(p.relative_to(ROOT)) for p in WITH_COMMANDS])
def test_page_commands_run_as_written(page, tmp_path):
    todo = commands(page)
    copy = None
    failures = []
    for command in todo:
        if skip_reason(command):
            continue
        line, dry = as_run(command)
        key = plan_key(line) if dry else None
        if key in _PLANNED:
            continue
        copy = copy or workflow_copy(tmp_path / "work")
        proc = run(line, copy)
        noise = NOISE.findall(proc.stdout + proc.stderr) if dry else []
        if proc.returncode != 0:
            failures.append(f"{command}\n  ran: {line}\n  exit {proc.returncode}\n"
                            f"{(proc.stdout + proc.stderr)[-3000:]}")
        elif noise:
            failures.append(f"{command}\n  ran: {line}\n  planned, but printed:\n" + "\n".join(noise[:10]))
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
    every = [c for page in SOURCES for c in commands(page)]
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


def test_commands_of_comments_and_prose(tmp_path):
    """Header comments give the commands indented like code (not prose that starts with a program's
    name), the Snakefile its docstring's, a page its inline `snakemake ...` spans, wrapped or not, as
    dry runs (the mini data target too)."""
    config = tmp_path / "small.yaml"
    config.write_text("# SMALL scale\n#   snakemake --cores all --configfile configs/small.yaml results/table1.csv\n"
                      "# make sure the target comes first\nscale: small  # snakemake reads it\n"
                      "#   TORCH_INDEX=https://example.org/cpu make install   # a note\n")
    assert [(c.line, c.bare) for c in commands(config)] == [
        (2, "snakemake --cores all --configfile configs/small.yaml results/table1.csv"),
        (5, "TORCH_INDEX=https://example.org/cpu make install")]
    snakefile = tmp_path / "Snakefile"
    snakefile.write_text('"""The DAG.\n\nsnakemake --cores all data   # mini\n"""\n\nsnakemake = 1\n')
    assert [(c.line, c.bare) for c in commands(snakefile)] == [(3, "snakemake --cores all data")]
    page = tmp_path / "page.md"
    page.write_text("Build it with `snakemake --cores all\ndata`, then `zsdr stats x`.\n"
                    "```bash\necho `snakemake --version`\n```\nOr `.venv/bin/snakemake -n tables`.\n")
    found = commands(page)
    assert [(c.line, c.text, c.inline) for c in found] == [
        (1, "snakemake --cores all data", True), (4, "echo `snakemake --version`", False),
        (6, ".venv/bin/snakemake -n tables", True)]
    assert as_run(found[0]) == ("snakemake --cores all data -n", True)
    assert plan_key(".venv/bin/snakemake -n tables") == plan_key("snakemake tables -n")

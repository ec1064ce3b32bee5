"""The README's table of a mini run: written from ``results/table1.csv``, and checked against a run.

    python -m zsdr.readme_table            # rewrite the README's table from results/table1.csv
    python -m zsdr.readme_table --check    # exit 1 when a cell differs from the run by more than TOLERANCE

The table sits between the README's two marker comments (:data:`START`, :data:`END`): one row per system
of ``table1.csv``, in its order, with nDCG@10 on each dataset and the target mean at :data:`DECIMALS`
decimals. The numbers of the same config are the same on every run on one machine; another CPU rounds
floating-point sums in other orders (its BLAS and vector kernels use other instruction sets), and the
trainings carry those last-bit differences into their weights, so another machine's run can differ from
the README's table by up to :data:`TOLERANCE` in a cell. ``make test-full`` (tests/test_mini_run.py) checks
the README's table against the run it makes within that tolerance.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from pathlib import Path

START = "<!-- table1-mini: written by `python -m zsdr.readme_table` from results/table1.csv -->"
END = "<!-- table1-mini: end -->"
DECIMALS = 3
TOLERANCE = 0.05
"""The largest difference (nDCG@10, absolute) allowed between a cell of the README's table and the same
cell of a mini run on another machine: the same CPU with its math kernels limited to AVX2 instead of AVX-512
moved a cell by at most 0.030 (the README says which), and another CPU may differ more."""

FIXED = ("system", "paper", "description", "role", "target_mean")


class TableError(ValueError):
    """A table1.csv or README that the table cannot be read from or written into; ``str()`` names the file
    and the fix."""


def read_table1(path: str | Path) -> tuple[list[str], dict[str, dict[str, float]]]:
    """``(dataset columns, {system: {column: value}})`` of ``table1.csv`` (the datasets in their order, then
    ``target_mean``)."""
    path = Path(path)
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except OSError as exc:
        raise TableError(f"{path}: cannot read it ({exc.strerror}) (fix: run `snakemake --cores all "
                         "results/table1.csv` first)") from None
    if not rows or "system" not in rows[0] or "target_mean" not in rows[0]:
        raise TableError(f"{path}: not a table1.csv (no `system` / `target_mean` columns) (fix: give the "
                         "results/table1.csv of a run)")
    header = list(rows[0])
    datasets = [c for c in header if c not in FIXED and not c.endswith(("_p", "_vs_baseline"))]
    columns = [*datasets, "target_mean"]
    table: dict[str, dict[str, float]] = {}
    for n, row in enumerate(rows, start=2):
        try:
            table[row["system"]] = {c: float(row[c]) for c in columns}
        except (TypeError, ValueError):
            raise TableError(f"{path}:{n}: a value of {row['system']!r} is not a number (fix: rebuild the table "
                             "with `snakemake --forcerun table1 results/table1.csv`)") from None
    return columns, table


def markdown(columns: list[str], table: dict[str, dict[str, float]], source: str | None = None) -> str:
    """The README's table: a header naming the source's dev split and the targets, one row per system."""
    def label(c: str) -> str:
        if c == "target_mean":
            return "target mean"
        return f"{c} (dev)" if c == source else c
    lines = ["| system | " + " | ".join(label(c) for c in columns) + " |",
             "|---|" + "--:|" * len(columns)]
    lines += [f"| {system} | " + " | ".join(f"{values[c]:.{DECIMALS}f}" for c in columns) + " |"
              for system, values in table.items()]
    return "\n".join(lines)


def _block(text: str, readme: Path) -> tuple[int, int]:
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        raise TableError(f"{readme}: no table between `{START}` and `{END}` (fix: put the two marker lines "
                         "around the mini table)")
    return start + len(START), end


def write_readme(readme: str | Path, table1: str | Path, source: str = "mini-source") -> bool:
    """Rewrite the README's table from ``table1``; whether the README changed."""
    readme = Path(readme)
    text = readme.read_text(encoding="utf-8")
    start, end = _block(text, readme)
    columns, table = read_table1(table1)
    new = text[:start] + "\n\n" + markdown(columns, table, source) + "\n\n" + text[end:]
    if new == text:
        return False
    readme.write_text(new, encoding="utf-8")
    return True


def readme_values(readme: str | Path) -> dict[str, dict[str, float]]:
    """``{system: {column label: value}}`` of the README's table (labels as the table shows them)."""
    readme = Path(readme)
    text = readme.read_text(encoding="utf-8")
    start, end = _block(text, readme)
    rows = [line.strip().strip("|").split("|") for line in text[start:end].strip().splitlines()]
    if len(rows) < 2:
        raise TableError(f"{readme}: the table between the markers is empty (fix: `python -m "
                         "zsdr.readme_table`)")
    header = [c.strip() for c in rows[0]]
    out = {}
    for cells in rows[2:]:
        cells = [c.strip() for c in cells]
        out[cells[0]] = {h: float(v) for h, v in zip(header[1:], cells[1:])}
    return out


def differences(readme: str | Path, table1: str | Path, tolerance: float = TOLERANCE,
                source: str = "mini-source") -> list[str]:
    """One line per disagreement between the README's table and a run's ``table1.csv``: a system in one
    and not the other, a column missing, or a cell more than ``tolerance`` apart."""
    columns, table = read_table1(table1)
    shown = readme_values(readme)
    label = {c: ("target mean" if c == "target_mean" else f"{c} (dev)" if c == source else c) for c in columns}
    out = [f"{s}: in {table1}, not in the README's table" for s in table if s not in shown]
    out += [f"{s}: in the README's table, not in {table1}" for s in shown if s not in table]
    for system, values in table.items():
        for c in columns:
            got = shown.get(system, {}).get(label[c])
            if system in shown and got is None:
                out.append(f"{system}: the README's table has no column {label[c]!r}")
            elif got is not None and not math.isclose(got, values[c], abs_tol=tolerance + 0.5 * 10 ** -DECIMALS):
                out.append(f"{system} {label[c]}: README {got:.{DECIMALS}f}, run {values[c]:.{DECIMALS}f} "
                           f"(more than {tolerance} apart)")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m zsdr.readme_table", description=__doc__.split("\n\n")[0])
    ap.add_argument("--csv", default="results/table1.csv", help="the run's table (default: results/table1.csv)")
    ap.add_argument("--readme", default="README.md", help="the README to write or check (default: README.md)")
    ap.add_argument("--check", action="store_true",
                    help=f"compare instead of writing: exit 1 when a cell is more than --tolerance apart")
    ap.add_argument("--tolerance", type=float, default=TOLERANCE, help=f"for --check (default: {TOLERANCE})")
    args = ap.parse_args(argv)
    try:
        if args.check:
            wrong = differences(args.readme, args.csv, args.tolerance)
            for line in wrong:
                print(line, file=sys.stderr)
            return 1 if wrong else 0
        changed = write_readme(args.readme, args.csv)
        print(f"{args.readme}: table {'rewritten' if changed else 'unchanged'} from {args.csv}")
        return 0
    except (TableError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

"""The hyperparameter card (:mod:`zsdr.plan.card`) as a Markdown page, and its comparison with the official values.

:class:`Reference` reads ``docs/methods/reference.yaml`` (per job pattern and field, the official value and its
source); :func:`compare` names every field of the card that has no entry there or differs from it;
:func:`markdown` is the page ``docs/methods/hparams-<scale>.md`` (``zsdr hparams``; ``python -m zsdr.docs``
writes it), with the comparison beside each row where a reference is given.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from zsdr.plan.card import FIELD_HELP, FIELDS, Row, fmt, inference_rows, training_rows


_WILDCARDS = re.compile(r"\*|\?|\[[^\]]*\]")   # what a pattern matches besides its literal characters


@dataclass
class Reference:
    """The official values of ``docs/methods/reference.yaml``: per job pattern (``fnmatch`` over the card's
    job names), per field, a value and its source."""

    entries: dict[str, dict[str, dict[str, Any]]]

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Reference":
        import yaml

        from zsdr.io import safe_yaml

        with open(path, encoding="utf-8") as f:
            raw = safe_yaml(f.read()) or {}
        entries = {}
        for pattern, fields in raw.items():
            if not isinstance(fields, dict):
                raise ValueError(f"{path}: entry {pattern!r} must map fields to {{value, source}}")
            entries[pattern] = {}
            for name, item in fields.items():
                if name not in FIELDS:
                    raise ValueError(f"{path}: {pattern}.{name}: unknown field (known: {', '.join(FIELDS)})")
                if not isinstance(item, dict) or "value" not in item or not item.get("source"):
                    raise ValueError(f"{path}: {pattern}.{name} needs a value and a source")
                entries[pattern][name] = item
        return cls(entries)

    def lookup(self, job: str, name: str) -> tuple[str, dict[str, Any]] | None:
        """The most specific entry (the longest pattern) that names ``job`` and gives field ``name``."""
        hits = [(p, f[name]) for p, f in self.entries.items() if name in f and fnmatch.fnmatchcase(job, p)]
        if not hits:
            return None
        return max(hits, key=lambda h: (len(_WILDCARDS.sub("", h[0])), -len(h[0])))


def same(card_value: Any, official: Any) -> bool:
    """Whether a card value equals a reference value: numbers numerically (within 5e-4 of the reference's
    magnitude for fractions: a learning rate of 1e-4 is not 2e-4), everything else as the card prints it."""
    if isinstance(card_value, (int, float)) and not isinstance(card_value, bool) and isinstance(official, (int, float)):
        if isinstance(card_value, float) or isinstance(official, float):
            return abs(float(card_value) - float(official)) <= 5e-4 * abs(float(official)) + 1e-12
        return int(card_value) == int(official)
    return fmt(card_value) == fmt(official)


def compare(rows: list[Row], reference: Reference, fields: Iterable[str] | None = None) -> list[str]:
    """Every mismatch between the card and the reference: a field of a job with no reference entry, or a
    different value (one line each, naming the job, field, both values and the entry)."""
    problems = []
    for row in rows:
        for name in fields or COLUMNS:
            value = row.values.get(name)
            if value is None:
                continue
            hit = reference.lookup(row.job, name)
            if hit is None:
                problems.append(f"{row.job}: {name} = {fmt(value)} has no reference entry "
                                f"(add `{row.job}: {{{name}: {{value, source}}}}` or a pattern naming it)")
                continue
            official = hit[1]["value"]
            target = _target(row.job)
            if target and isinstance(official, str):
                official = official.replace("<target>", target)
            if not same(value, official):
                problems.append(f"{row.job}: {name} = {fmt(value)}, but reference entry {hit[0]!r} says "
                                f"{fmt(hit[1]['value'])} ({hit[1]['source']})")
    return problems


# -------------------------------------------------------------------------------------------- markdown
def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in r) + " |" for r in rows]
    return out


def _target(job: str) -> str | None:
    return job.rsplit("@", 1)[1] if "@" in job else None


def grouped(rows: list[Row]) -> list[tuple[list[Row], dict[str, str]]]:
    """Rows of one config section that differ only by their target (``<recipe>@<target>`` runs), merged:
    each group with its printed values, the target written ``<target>``."""
    groups: dict[tuple, list[Row]] = {}
    printed: dict[tuple, dict[str, str]] = {}
    for row in rows:
        target = _target(row.job)
        shown = {}
        for name in FIELDS:
            text = fmt(row.values.get(name)) if row.values.get(name) is not None else ""
            if text and row.marks.get(name):
                text = f"{row.marks[name]} {text}"
            shown[name] = text.replace(target, "<target>") if target else text
        key = (row.source, row.job.split("@")[0] if target else row.job, tuple(shown.items()))
        groups.setdefault(key, []).append(row)
        printed[key] = shown
    return [(members, printed[key]) for key, members in groups.items()]


SECTIONS = (("train", "Recipes"), ("dam", "DDR's domain adaption modules (MLM)"),
            ("pretrain", "COCO pretraining"), ("cross-encoder", "Cross-encoders"), ("reader", "Readers"),
            ("generator", "Query generators"))
COLUMNS = ("example", "examples_per_epoch", "epochs", "steps", "warmup", "lr", "optimizer", "schedule", "horizon",
           "lr_at_end", "global_batch", "negatives", "lengths", "precision", "init", "head")
SHORT = {"examples_per_epoch": "examples / epoch", "lr_at_end": "lr at end", "global_batch": "global batch",
         "optimizer": "opt."}


def markdown(plan: Any, scale: str, reference: Reference | None = None) -> str:
    """The card as a Markdown page; with ``reference``, each row says whether it matches the official values."""
    rows = training_rows(plan)
    command = "zsdr hparams" + ("" if scale == "mini" else f" --configfile configs/{scale}.yaml")
    lines = [
        f"# Hyperparameter card: {scale} scale",
        "",
        f"Generated from the plan by `{command}` (`zsdr.plan.card`; `python -m zsdr.docs` rewrites this page and",
        "tests/test_hparams.py checks it is current). No training runs: every number is what the job will do, the",
        "steps and the learning rate computed by the trainer's own functions. Runs of one recipe that differ only by",
        "their target are one row (`<target>` in a value stands for each).",
        "",
    ]
    if reference is not None:
        lines += [
            "The last column compares each row with the official values of [reference.yaml](reference.yaml), which",
            "gives each value's source ([C] official code, [C-RM] its README or scripts, [P] paper, [X] our choice;",
            "[README.md](README.md#provenance-tags)); the test fails when a value has no entry there or differs.",
            "",
        ]
    lines += ["## Fields", ""]
    lines += _table(["field", "meaning"], [[SHORT.get(f, f), FIELD_HELP[f]] for f in COLUMNS])
    notes: list[str] = []
    for prefix, title in SECTIONS:
        members = [r for r in rows if r.job.split(" ", 1)[0] == prefix]
        if not members:
            continue
        lines += ["", f"## {title}", ""]
        header = ["job", *[SHORT.get(c, c) for c in COLUMNS]] + (["official"] if reference is not None else [])
        table = []
        for group, shown in grouped(members):
            first = group[0]
            name = first.job.split(" ", 1)[1]
            if len(group) > 1 or _target(first.job):
                targets = [_target(r.job) for r in group]
                name = f"{name.split('@')[0]}@<target> ({len(targets)}: {', '.join(targets)})"
            cells = [f"`{name}`", *[shown[c] for c in COLUMNS]]
            if reference is not None:
                problems = compare(group, reference, COLUMNS)
                cells.append("✓" if not problems else "; ".join(problems))
            table.append(cells)
            for note in first.notes:
                notes.append(f"`{name}`: {note}")
        lines += _table(header, table)
    if notes:
        lines += ["", "## Notes", "", *[f"* {n}" for n in dict.fromkeys(notes)]]
    inference = inference_rows(plan)
    lines += ["", "## Inference lengths per dataset", ""]
    if inference:
        lines += ["Dense systems whose encode, search and mining jobs use other lengths on some datasets "
                  "(`dataset_lengths`: a paper's evaluation settings); every other system encodes every dataset "
                  "at its own lengths.", ""]
        table = [[_names(r["systems"]), _q_d(r["default"]),
                  "; ".join(f"{d} {_q_d(l)}" for d, l in r["datasets"])] for r in inference]
        lines += _table(["systems", "lengths", "per dataset"], table)
    else:
        lines.append("Every dense system encodes every dataset at its own lengths.")
    return "\n".join(lines) + "\n"


def _names(systems: list[str], most: int = 12) -> str:
    """System names for a table cell: the recipes' own first, then how many episode, step and mining systems."""
    derived = [s for s in systems if "." in s or s.rsplit("-ep", 1)[-1].isdigit()]
    main = [s for s in systems if s not in derived]
    shown = ", ".join(f"`{s}`" for s in main[:most])
    more = len(main) - most
    extra = [f"{more} more" for _ in [0] if more > 0] + [f"{len(derived)} episode / step / mining systems of these"
                                                          for _ in [0] if derived]
    return shown + (f" (+ {'; '.join(extra)})" if extra else "")


def _q_d(lengths: tuple[int | None, int | None]) -> str:
    q, d = lengths
    return f"q{q if q is not None else '(model)'}/d{d if d is not None else '(model)'}"

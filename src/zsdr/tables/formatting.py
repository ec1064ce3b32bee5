"""How a table prints its values, shared by every table builder: the number formats of a spec
(``d3``, ``pct1``, ``+d3``, ``int``), a published cell read back as a number, the best and second-best
of a row, Markdown cells and pipe tables, and writing a table's CSV and Markdown atomically.
"""

from __future__ import annotations

import math
import os

import pandas as pd

from zsdr.io import atomic_write
from zsdr.tables.spec_model import FORMAT_RE


def _fmt_parts(fmt: str) -> tuple[str, int, bool]:
    m = FORMAT_RE.match(fmt)
    if not m:
        raise ValueError(f"unknown format {fmt!r}")
    if fmt == "int":
        return "d", 0, False
    return m.group(2), int(m.group(3)), bool(m.group(1))


def format_value(value: float | None, fmt: str = "d3") -> str:
    """``0.6034`` -> ``0.603`` (d3), ``11.1%`` (pct1), ``+0.102`` (+d3), ``171332`` (int)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    kind, digits, signed = _fmt_parts(fmt)
    scaled = value * 100 if kind == "pct" else value
    text = f"{scaled:+.{digits}f}" if signed else f"{scaled:.{digits}f}"
    if text.lstrip("+-") == f"{0:.{digits}f}":  # no "-0.000"
        text = ("+" if signed else "") + text.lstrip("+-")
    return text + ("%" if kind == "pct" else "")


def format_delta(delta: float | None, fmt: str = "d3") -> str:
    """A difference in the unit of ``fmt``: ``+0.012``, ``-1.3 pp`` for percentages."""
    if delta is None:
        return ""
    kind, digits, _ = _fmt_parts(fmt)
    if kind == "pct":
        return format_value(delta, f"+pct{digits}")[:-1] + " pp"
    return format_value(delta, f"+d{digits}")


def rounded(value: float, fmt: str) -> float:
    """``value`` at the precision it is printed with (emphasis compares printed values)."""
    kind, digits, _ = _fmt_parts(fmt)
    return round(value * 100, digits) if kind == "pct" else round(value, digits)


def parse_published(text: str | None) -> float | None:
    """A published cell as a number (``11.1%`` -> 0.111, ``+0.102`` -> 0.102); None for text/empty."""
    if text is None:
        return None
    t = text.strip().replace("\u2212", "-")
    pct = t.endswith("%")
    try:
        value = float(t.rstrip("%"))
    except ValueError:
        return None
    return value / 100 if pct else value


def emphasis_ranks(values: dict[str, float], lower_is_better: bool = False) -> tuple[set[str], set[str]]:
    """(best keys, second-best keys) of already-rounded values; ties share a rank."""
    distinct = sorted(set(values.values()), reverse=not lower_is_better)
    best = {k for k, v in values.items() if distinct and v == distinct[0]}
    second = {k for k, v in values.items() if len(distinct) > 1 and v == distinct[1]}
    return best, second


def md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("*", "\\*").replace("_", "\\_")


def md_value(text: str, emphasis: str = "", marker: str = "") -> str:
    """A value for a Markdown cell: ``**0.720**\\*\\*`` (bold, then the escaped marker)."""
    out = md_escape(text)
    if "underline" in emphasis:
        out = f"<u>{out}</u>"
    if "bold" in emphasis:
        out = f"**{out}**"
    return out + md_escape(marker)


def md_table(header: list[str], rows: list[list[str]]) -> str:
    """A pipe table of already formatted strings (tabulate leaves them as they are)."""
    frame = pd.DataFrame(rows, columns=range(len(header)))
    frame.columns = header
    return frame.to_markdown(index=False, disable_numparse=True)


def write_outputs(frame: pd.DataFrame, markdown: str, out_csv: str | os.PathLike, out_md: str | os.PathLike) -> None:
    """Write the CSV and the Markdown atomically."""
    with atomic_write(out_csv) as fh:
        frame.to_csv(fh, index=False, lineterminator="\n")
    with atomic_write(out_md) as fh:
        fh.write(markdown if markdown.endswith("\n") else markdown + "\n")

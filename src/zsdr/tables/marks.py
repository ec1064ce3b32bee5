"""What a table marks on its cells: significance markers (a paired test between two columns, per
line, optionally Holm-corrected over the table: :mod:`zsdr.evaluation.significance`) and emphasis
(bold best, underlined second or best among a set), both as the spec's ``significance`` and
``emphasis`` sections say.
"""

from __future__ import annotations

from zsdr.evaluation.significance import compare, holm, marker
from zsdr.io import DataError
from zsdr.tables.cells import Line, TableCells, entry_name
from zsdr.tables.formatting import emphasis_ranks, rounded


def paired_test(a: dict, b: dict, test: str, trials: int, where: str) -> dict:
    """:func:`zsdr.evaluation.significance.compare` (Fisher seeded), its errors naming the table cell."""
    kw = {"trials": trials, "seed": 0} if test == "fisher" else {}
    try:
        return compare(a, b, test=test, **kw)
    except ValueError as exc:
        raise DataError(None, None, f"{where}: {exc}", "evaluate both systems' runs against the same qrels") from None


def apply_significance(table: TableCells) -> None:
    """Test the spec's comparisons on every line and set the markers (and p-values) of the cells they attach to."""
    sig = table.sig
    if sig is None or not sig.comparisons:
        return
    records = []
    for line in table.lines:
        if line.entry.kind == "info":
            continue
        for comp in sig.comparisons:
            a_entry = table.entries[comp.column]
            for against in comp.against:
                b_entry = table.entries[against]
                a, b = table.cell(line, a_entry), table.cell(line, b_entry)
                if a.value is None or b.value is None:
                    missing, cell = (b_entry, b) if b.value is None else (a_entry, a)
                    note = f"comparisons with {entry_name(missing)} not tested: {cell.reason}"
                    if note not in table.untested:
                        table.untested.append(note)
                    continue
                if line.entry.kind == "average" and sig.unit == "datasets":
                    pa, pb = a.parts, b.parts
                else:
                    pa, pb = a.per_query, b.per_query
                if pa is None or pb is None or len(pa) < 2:
                    continue
                where = f"{table.spec.name}: {line.key} {a_entry.key} vs {b_entry.key}"
                result = paired_test(pa, pb, sig.test, sig.trials, where)
                metric = table.metric_of(a_entry, line) or ""
                lower = metric.startswith("hole@")
                better = result["mean_a"] < result["mean_b"] if lower else result["mean_a"] > result["mean_b"]
                attach = {"self": comp.column, "against": against}.get(comp.attach, comp.attach)
                records.append([line, attach, result["p"], comp.symbols, better, f"{comp.column} vs {against}"])
    if sig.holm:
        for rec, p in zip(records, holm([r[2] for r in records])):
            rec[2] = p
    for line, attach, p, symbols, better, label in records:
        target = table.cell(line, table.entries[attach])
        target.p_values.append(f"{label}: {p:.4g}")
        if better:
            target.marker += marker(p, symbols)


def apply_emphasis(table: TableCells) -> None:
    """Mark the best (bold) and second-best or best-among (underline) printed values of every line."""
    emph = table.spec.emphasis
    if emph is None:
        return
    for line in table.lines:
        if line.entry.kind == "info":
            continue

        def printed(keys):
            out = {}
            for k in keys:
                entry = table.entries[k]
                c = table.cell(line, entry)
                if c.value is not None:
                    out[k] = rounded(c.value, table.fmt_of(entry, table.metric_of(entry, line)))
            return out

        for group in emph.among:
            best, second = emphasis_ranks(printed(group), emph.lower_is_better)
            for k in best if emph.bold else ():
                _mark(table, line, k, "bold")
            if emph.underline == "second":
                for k in second:
                    _mark(table, line, k, "underline")
        if isinstance(emph.underline, tuple):
            best, _ = emphasis_ranks(printed(emph.underline), emph.lower_is_better)
            for k in best:
                _mark(table, line, k, "underline")


def _mark(table: TableCells, line: Line, key: str, what: str) -> None:
    c = table.cell(line, table.entries[key])
    parts = set(filter(None, c.emphasis.split("+"))) | {what}
    c.emphasis = "+".join(p for p in ("bold", "underline") if p in parts)

"""The generated documentation: the configuration reference and the hyperparameter cards.

``python -m zsdr.docs`` (or ``make docs``) reads ``schemas/config.schema.yaml`` and writes
``docs/configuration.md``: one table per top-level key (key path, type, default, description), then
the shared definitions the tables point to; and it writes the hyperparameter card of the paper and small
scales (``docs/methods/hparams-<scale>.md``, :mod:`zsdr.plan.card`; the paper's beside the official values
of ``docs/methods/reference.yaml``). ``python -m zsdr.docs --check`` exits 1 when a file on disk differs
from what the schema and configs give (the test suite runs the same comparisons).

Key paths: ``a.b`` is key ``b`` inside ``a``; ``a.<name>`` stands for any key of a map whose entries
share one shape (``systems.<name>.kind``); ``a[]`` is an item of a list.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

SCHEMA = Path("schemas") / "config.schema.yaml"
OUTPUT = Path("docs") / "configuration.md"
COMMAND = "python -m zsdr.docs"

_CONSTRAINTS = (("minimum", ">= {}"), ("exclusiveMinimum", "> {}"), ("maximum", "<= {}"),
                ("exclusiveMaximum", "< {}"), ("minItems", "at least {} items"),
                ("maxItems", "at most {} items"), ("pattern", "matches `{}`"))


def _one_line(text) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _value(value) -> str:
    return "`" + json.dumps(value, ensure_ascii=False).replace("|", "\\|") + "`"


def _ref_name(node: dict) -> str | None:
    ref = node.get("$ref")
    if ref is None:
        return None
    prefix = "#/$defs/"
    if not ref.startswith(prefix):
        raise ValueError(f"{SCHEMA}: $ref {ref!r} is not a local $defs reference (fix: point it into #/$defs/)")
    return ref[len(prefix):]


class Reference:
    """Rows of the reference for one schema: ``rows(node, path)`` walks a node depth first."""

    def __init__(self, schema: dict):
        self.schema = schema
        self.defs: dict = schema.get("$defs", {})

    def _is_table(self, name: str) -> bool:
        """A definition with keys of its own gets its own table; a scalar one is shown inline."""
        node = self.defs[name]
        return bool(node.get("properties")) or node.get("type") == "object"

    def type_of(self, node: dict) -> str:
        name = _ref_name(node)
        if name is not None:
            if self._is_table(name):
                return f"[{name}](#{name.lower()})"
            return self.type_of({**self.defs[name], **{k: v for k, v in node.items() if k != "$ref"}})
        if "const" in node:
            return _value(node["const"])
        if "enum" in node:
            return " \\| ".join(_value(v) for v in node["enum"])
        kind = node.get("type")
        if kind is None:
            branches = node.get("oneOf") or node.get("anyOf")
            if branches and all("required" not in b for b in branches):
                return " or ".join(self.type_of(b) for b in branches)
            return "object" if "properties" in node else "any"
        kinds = kind if isinstance(kind, list) else [kind]
        shown = []
        for k in kinds:
            if k == "array" and isinstance(node.get("items"), dict):
                items = node["items"]
                inner = "object" if "properties" in items else self.type_of(items)
                shown.append(f"list of {inner}")
            elif k == "object" and isinstance(node.get("additionalProperties"), dict) and "properties" not in node:
                shown.append(f"map of {self.type_of(node['additionalProperties'])}")
            else:
                shown.append(k)
        return " or ".join(shown)

    def describe(self, node: dict) -> str:
        text = _one_line(node.get("description", ""))
        if _ref_name(node) and not text:
            ref = self.defs[_ref_name(node)]
            if not self._is_table(_ref_name(node)):
                text = _one_line(ref.get("description", ""))
        limits = [form.format(node[key]) for key, form in _CONSTRAINTS if key in node]
        if limits:
            text = (text + " " if text else "") + "(" + ", ".join(limits) + ")"
        return text

    def rows(self, node: dict, path: str, required: bool = False) -> list[tuple[str, str, str, str]]:
        default = _value(node["default"]) if "default" in node else ("required" if required else "")
        out = [(f"`{path}`", self.type_of(node), default, self.describe(node))]
        out.extend(self.children(node, path))
        return out

    def children(self, node: dict, path: str) -> list[tuple[str, str, str, str]]:
        out: list[tuple[str, str, str, str]] = []
        seen: set[str] = set()

        def add(rows):
            for row in rows:
                if row[0] not in seen:
                    seen.add(row[0])
                    out.append(row)

        required = set(node.get("required", []))
        for key, child in node.get("properties", {}).items():
            add(self.rows(child, f"{path}.{key}" if path else key, key in required))
        for branch in [*node.get("allOf", []), *node.get("oneOf", []), *node.get("anyOf", [])]:
            if isinstance(branch, dict) and "properties" in branch:
                add(self.children(branch, path))
            for sub in ("then", "else"):
                if isinstance(branch, dict) and isinstance(branch.get(sub), dict):
                    add(self.children(branch[sub], path))
        extra = node.get("additionalProperties")
        if isinstance(extra, dict) and _ref_name(extra) is None and ("properties" in extra or "allOf" in extra):
            add(self.children(extra, f"{path}.<name>"))
        items = node.get("items")
        if isinstance(items, dict) and _ref_name(items) is None and "properties" in items:
            add(self.children(items, f"{path}[]"))
        return out


def _table(rows) -> list[str]:
    lines = ["| key | type | default | description |", "|---|---|---|---|"]
    lines += [f"| {path} | {kind} | {default} | {text} |" for path, kind, default, text in rows]
    return lines


def render(schema: dict) -> str:
    """The Markdown reference of ``schema`` (a parsed config schema)."""
    ref = Reference(schema)
    lines = [
        "# Configuration reference",
        "",
        f"<!-- Generated from {SCHEMA.as_posix()} by `{COMMAND}`; do not edit by hand. -->",
        "",
        _one_line(schema.get("description", "")).replace("\\|", "|"),
        "",
        "Every key the workflow accepts, from the schema it validates the configuration against. "
        "`a.b` is key `b` inside `a`; `a.<name>` is any key of a map whose entries share one shape; "
        "`a[]` is an item of a list. *default* is the value the schema fills in when the key is absent "
        "(empty: none, the key may stay unset); *required* keys must be given. `config.yaml` sets the mini "
        "scale's values, `configs/papers/*.yaml` each paper's, `configs/small.yaml` and `configs/paper.yaml` "
        "those of the other scales (see [running](running.md)). Abbreviations: [glossary](glossary.md).",
        "",
        "## Top-level keys",
        "",
    ]
    top = schema.get("properties", {})
    sections = [key for key, node in top.items() if ref.children(node, key)]
    lines += _table([(f"[`{key}`](#{key.lower()})" if key in sections else f"`{key}`", ref.type_of(node),
                      _value(node["default"]) if "default" in node
                      else ("required" if key in schema.get("required", []) else ""), ref.describe(node))
                     for key, node in top.items()])
    for key in sections:
        node = top[key]
        lines += ["", f"## {key}", ""]
        lines += _table(ref.rows(node, key, key in schema.get("required", [])))
    tables = [name for name in ref.defs if ref._is_table(name)]
    if tables:
        lines += ["", "## Shared definitions", "", "Shapes that several keys above refer to."]
        for name in tables:
            lines += ["", f"### {name}", ""]
            lines += _table(ref.rows(ref.defs[name], name))
    return "\n".join(lines) + "\n"


def render_file(schema_path: Path = SCHEMA) -> str:
    if not schema_path.is_file():
        raise FileNotFoundError(f"{schema_path}: no config schema here (fix: run this from a checkout of zsdr, "
                                "or give --schema)")
    from zsdr.workflow import config_schema

    return render(config_schema(schema_path))


CARDS = {"paper": Path("docs") / "methods" / "hparams-paper.md", "small": Path("docs") / "methods" / "hparams-small.md"}
REFERENCE = Path("docs") / "methods" / "reference.yaml"


def render_card(scale: str, root: Path = Path(".")) -> str:
    """The hyperparameter card of ``configs/<scale>.yaml`` (the paper's with the official values beside)."""
    from zsdr.plan.card_page import Reference, markdown
    from zsdr.plan.core import load_plan

    plan = load_plan(root, root / "configs" / f"{scale}.yaml")
    reference = Reference.load(root / REFERENCE) if scale == "paper" else None
    return markdown(plan, scale, reference)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description="Write the configuration reference "
                                     f"({OUTPUT.as_posix()}) from the config schema ({SCHEMA.as_posix()}).")
    parser.add_argument("--schema", type=Path, default=SCHEMA, help="the config schema (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=OUTPUT, help="the reference to write (default: %(default)s)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a file is out of date")
    parser.add_argument("--no-cards", dest="cards", action="store_false",
                        help="leave out the hyperparameter cards (docs/methods/hparams-*.md)")
    args = parser.parse_args(argv)
    try:
        text = render_file(args.schema)
    except (FileNotFoundError, ValueError, yaml.YAMLError) as exc:
        print(f"{COMMAND}: error: {exc}", file=sys.stderr)
        return 2
    outputs = [(args.out, text, args.schema)]
    if args.cards:
        for scale, path in CARDS.items():
            outputs.append((path, render_card(scale), f"configs/{scale}.yaml"))
    stale = 0
    for out, text, source in outputs:
        current = out.read_text(encoding="utf-8") if out.is_file() else None
        if args.check:
            if current != text:
                print(f"{out}: out of date with {source} (fix: run `{COMMAND}`)", file=sys.stderr)
                stale += 1
            continue
        if current != text:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text, encoding="utf-8")
            print(f"wrote {out}")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())

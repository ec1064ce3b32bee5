"""A config default is written once, in schemas/config.schema.yaml: the workflow fills every default into the
config before the plan is built, and the plan passes the filled values on (specs, job fields), so a default
written again in src/zsdr is either dead or, the day the schema's value changes, a second, silently different
value. Three forms of that are refused, each found from the schema's own keys rather than a list of examples:

* a fallback on a config section (or a dict the plan builds from one): ``section.get("<key>", <value>)``
  (also ``.setdefault`` and ``.pop``) whose value is a default the schema gives a key of that name, in
  src/zsdr, workflow_scripts/ and rules/;
* a dataclass that mirrors a schema section (most of its fields are keys of one section): a field the schema
  gives a default carries none of its own;
* a keyword default, equal to the schema's default of a key of the same name, of a function the workflow's
  scripts call with a job's values (those functions receive config values).

Empty values (``{}``, ``[]``, ``""``, None) are "absent", not defaults, and are not compared. A few reads
look like config fallbacks and are not (a model folder's own metadata, Snakemake's resources, the paper
tables' own spec files): :data:`NOT_CONFIG` names each with why. :data:`PENDING` lists the defaults this
rule found that are still written twice; it may only shrink (a listed entry that is gone fails too, so the
list stays true).
"""

from __future__ import annotations

import ast
import functools
import re
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "schemas" / "config.schema.yaml"
SRC = ROOT / "src" / "zsdr"
SCRIPTS = ROOT / "workflow_scripts"

# (module path under src/zsdr, key): why the read is not a config default
NOT_CONFIG = {
    ("docs.py", "description"): "reads the schema's own nodes (their description text)",
    ("plan/resources.py", "nodes"): "a job's Snakemake resources (no `nodes` resource: one node)",
    ("workflow.py", "nodes"): "a job's Snakemake resources (no `nodes` resource: one node)",
    ("models/cross_encoder.py", "head"): "a model folder's own zsdr.json (older folders lack the key)",
    ("models/reader.py", "max_length"): "a model folder's own zsdr.json (older folders lack the key)",
    ("models/cards.py", "episodes"): "a trained model's training.json (recorded for episode runs only)",
    ("models/cards.py", "processes"): "a trained model's training.json (older records lack the key)",
    ("tables/spec.py", "test"): "a paper table's spec file (tables/*.yaml), its own format",
    ("tables/spec.py", "holm"): "a paper table's spec file (tables/*.yaml), its own format",
    ("tables/spec.py", "trials"): "a paper table's spec file (tables/*.yaml), its own format",
    ("tables/spec_model.py", "test"): "the paper table spec format's dataclass (tables/*.yaml), not the config's",
    ("tables/spec_model.py", "holm"): "the paper table spec format's dataclass (tables/*.yaml), not the config's",
    ("tables/spec_model.py", "trials"): "the paper table spec format's dataclass (tables/*.yaml), not the config's",
}

# Defaults still written twice: (form, module under src/zsdr, what, key). Each goes when its module is
# converted; nothing may be added. The library's own dataclasses and the keyword defaults of the functions the
# scripts call are used with partial arguments by the tests and benchmarks (TrainConfig alone ~50 times), and
# several modules are being reworked elsewhere (the batching helper: weak.py, teacher.py; the 600-line split:
# lucene.py, download.py; the k-means defaults: idro.kmeans).
PENDING: set[tuple[str, str, str, str]] = {
    # the rules and scripts converted to one job object each read the job's values instead
    # src/zsdr
    ('fallback', 'data/mini.py', 'titles', 'titles'),
    ('fallback', 'models/generator.py', 'dropout', 'dropout'),
    ('fallback', 'models/tiny.py', 'dropout', 'dropout'),
    ('dataclass', 'models/adapters.py', 'RemConfig.adapter_bottleneck', 'rem'),
    ('dataclass', 'models/adapters.py', 'RemConfig.adapter_scaling', 'rem'),
    ('dataclass', 'models/adapters.py', 'RemConfig.lora_dropout', 'rem'),
    ('dataclass', 'models/adapters.py', 'RemConfig.lora_r', 'rem'),
    ('dataclass', 'models/adapters.py', 'RemConfig.lora_targets', 'rem'),
    ('dataclass', 'plan/site.py', 'Site.cpus_per_gpu', 'site'),
    ('dataclass', 'plan/site.py', 'Site.index_threads', 'site'),
    ('dataclass', 'training/config.py', 'TrainConfig.adam_eps', 'train'),
    ('dataclass', 'training/config.py', 'TrainConfig.grad_accum', 'train'),
    ('dataclass', 'training/config.py', 'TrainConfig.max_grad_norm', 'train'),
    ('dataclass', 'training/config.py', 'TrainConfig.optimizer', 'train'),
    ('dataclass', 'training/config.py', 'TrainConfig.schedule', 'train'),
    ('dataclass', 'training/config.py', 'TrainConfig.warmup_steps', 'train'),
    ('dataclass', 'training/config.py', 'TrainConfig.weight_decay', 'train'),
    ('keyword', 'data/download.py', 'download(retries)', 'retries'),
    ('keyword', 'data/download.py', 'download(timeout)', 'timeout'),
    ('keyword', 'evaluation/tsne.py', 'tsne_map(batch_size)', 'batch_size'),
    ('keyword', 'evaluation/unit_analysis.py', 'write_unit_analysis(batch_size)', 'batch_size'),
    ('keyword', 'evaluation/unit_analysis.py', 'write_unit_analysis(device)', 'device'),
    ('keyword', 'evaluation/unit_analysis.py', 'write_unit_analysis(scale)', 'scale'),
    ('keyword', 'retrieval/encode.py', 'encode_corpus_shard(batch_size)', 'batch_size'),
    ('keyword', 'retrieval/encode.py', 'encode_corpus_shard(dtype)', 'dtype'),
    ('keyword', 'retrieval/encode.py', 'encode_queries_file(batch_size)', 'batch_size'),
    ('keyword', 'retrieval/mine.py', 'mine_negatives(batch_size)', 'batch_size'),
    ('keyword', 'retrieval/mine.py', 'mine_negatives(depth)', 'depth'),
    ('keyword', 'retrieval/mine.py', 'mine_negatives(sample)', 'sample'),
    ('keyword', 'retrieval/mine.py', 'mine_negatives(seed)', 'seed'),
    ('keyword', 'retrieval/search.py', 'search_datasets(batch_size)', 'batch_size'),
    ('keyword', 'retrieval/search.py', 'search_datasets(dtype)', 'dtype'),
    ('keyword', 'sparse/lucene.py', 'bm25_negatives(b)', 'b'),
    ('keyword', 'sparse/lucene.py', 'bm25_negatives(depth)', 'depth'),
    ('keyword', 'sparse/lucene.py', 'bm25_negatives(k1)', 'k1'),
    ('keyword', 'sparse/lucene.py', 'bm25_negatives(threads)', 'threads'),
    ('keyword', 'sparse/lucene.py', 'bm25_run(b)', 'b'),
    ('keyword', 'sparse/lucene.py', 'bm25_run(depth)', 'depth'),
    ('keyword', 'sparse/lucene.py', 'bm25_run(k1)', 'k1'),
    ('keyword', 'sparse/lucene.py', 'bm25_run(remove_query)', 'remove_query'),
    ('keyword', 'sparse/lucene.py', 'bm25_run(threads)', 'threads'),
    ('keyword', 'sparse/lucene.py', 'build_index(threads)', 'threads'),
    ('keyword', 'tables/cocodr_figures.py', 'render_figure3(metric)', 'metric'),
    ('keyword', 'tables/cocodr_figures.py', 'render_figure4(metric)', 'metric'),
    ('keyword', 'tables/cocodr_figures.py', 'render_figure5(metric)', 'metric'),
    ('keyword', 'tables/rmsc_figures.py', 'render_curves(metric)', 'metric'),
    ('keyword', 'training/launch.py', 'launch(nodes)', 'nodes'),
    ('keyword', 'training/launch.py', 'launch(processes)', 'processes'),
    ('keyword', 'training/teacher.py', 'score_pairs(batch_size)', 'batch_size'),
    ('keyword', 'training/teacher.py', 'score_pairs(random_candidates)', 'random_candidates'),
    ('keyword', 'training/teacher.py', 'score_pairs(seed)', 'seed'),
    ('keyword', 'training/unit_labels.py', 'label_shard(b)', 'b'),
    ('keyword', 'training/unit_labels.py', 'label_shard(batch_size)', 'batch_size'),
    ('keyword', 'training/unit_labels.py', 'label_shard(delta)', 'delta'),
    ('keyword', 'training/unit_labels.py', 'label_shard(k1)', 'k1'),
    ('keyword', 'training/unit_labels.py', 'label_shard(variant)', 'variant'),
    ('keyword', 'training/unit_labels.py', 'write_statistics(b)', 'b'),
    ('keyword', 'training/unit_labels.py', 'write_statistics(collection)', 'collection'),
    ('keyword', 'training/unit_labels.py', 'write_statistics(k1)', 'k1'),
    ('keyword', 'training/unit_labels.py', 'write_statistics(variant)', 'variant'),
}


# ------------------------------------------------------------------------------------------- the schema
def schema_sections(schema: dict) -> dict[str, dict[str, dict]]:
    """Every object section of the schema by key path (``recipes.<name>.dro``): its properties' nodes,
    ``$ref``s and ``allOf``/``anyOf``/``oneOf`` branches followed."""
    defs = schema.get("$defs", {})
    out: dict[str, dict[str, dict]] = {}

    def walk(node, path, seen=()):
        if not isinstance(node, dict):
            return
        ref = node.get("$ref", "")
        if ref.startswith("#/$defs/") and ref[8:] not in seen:
            walk(defs[ref[8:]], path, (*seen, ref[8:]))
        for branch in ("allOf", "anyOf", "oneOf"):
            for sub in node.get(branch, []):
                walk(sub, path, seen)
        props = node.get("properties") or {}
        if props:
            out.setdefault(path, {}).update(props)
        for key, sub in props.items():
            walk(sub, f"{path}.{key}" if path else key, seen)
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], f"{path}.<name>", seen)
        if isinstance(node.get("items"), dict):
            walk(node["items"], f"{path}[]", seen)

    walk(schema, "")
    return out


def schema_defaults(sections: dict[str, dict[str, dict]]) -> dict[str, list[tuple[str, object]]]:
    """key name -> [(key path, default)] of every key the schema gives a default."""
    out = defaultdict(list)
    for path, props in sections.items():
        for key, node in props.items():
            if isinstance(node, dict) and "default" in node:
                out[key].append((f"{path}.{key}" if path else key, node["default"]))
    return out


def _empty(value) -> bool:
    return value is None or (isinstance(value, (dict, list, tuple, str)) and not value)


def _same(a, b) -> bool:
    """Equal and of one kind (True is no 1, 1 is 1.0)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def _absent(node: ast.expr) -> bool:
    """A field default that says "not set": None or an empty value (``field(default_factory=dict)`` too)."""
    ok, value = _literal(node)
    if ok:
        return _empty(value)
    return (isinstance(node, ast.Call) and ast.unparse(node.func) in ("field", "dataclasses.field")
            and not node.args and [k.arg for k in node.keywords] == ["default_factory"]
            and ast.unparse(node.keywords[0].value) in ("dict", "list", "tuple"))


def _literal(node: ast.expr):
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


def _matches(defaults, key: str, value) -> list[str]:
    return [path for path, d in defaults.get(key, ()) if _same(d, value)]


# ------------------------------------------------------------------------------------------- the checks
def fallbacks(tree: ast.AST, defaults) -> list[tuple[int, str, str]]:
    """``x.get("<key>", <a schema default of key>)`` (and setdefault / pop): (line, key, schema paths)."""
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("get", "setdefault", "pop") and len(node.args) == 2):
            continue
        key = node.args[0]
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
            continue
        ok, value = _literal(node.args[1])
        if ok and not _empty(value):
            paths = _matches(defaults, key.value, value)
            if paths:
                found.append((node.lineno, key.value, ", ".join(paths)))
    return found


_RULE_GET = re.compile(r"""\.(?:get|setdefault|pop)\(\s*(["'])(\w+)\1\s*,\s*([^(),]+?)\s*\)""", re.S)


def rule_fallbacks(text: str, defaults) -> list[tuple[int, str, str]]:
    """:func:`fallbacks` in a rule file (Snakemake's syntax is no Python: each ``.get("<key>", <value>)`` call,
    over lines too, is read alone)."""
    found = []
    for m in _RULE_GET.finditer(text):
        try:
            ok, value = _literal(ast.parse(m.group(3), mode="eval").body)
        except SyntaxError:
            continue
        paths = _matches(defaults, m.group(2), value) if ok and not _empty(value) else []
        if paths:
            found.append((text.count("\n", 0, m.start()) + 1, m.group(2), ", ".join(paths)))
    return found


def _dataclass_fields(cls: ast.ClassDef) -> list[ast.AnnAssign]:
    return [s for s in cls.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
            and not ast.unparse(s.annotation).startswith(("ClassVar", "typing.ClassVar"))]


def mirrored_section(cls: ast.ClassDef, sections) -> str | None:
    """The schema section a class's fields mirror: at least 3 of its fields, and at least half of them, are
    keys of that one section."""
    names = {s.target.id for s in _dataclass_fields(cls)}
    if len(names) < 3:
        return None
    path, props = max(sections.items(), key=lambda kv: (len(names & set(kv[1])), -len(kv[0])))
    overlap = names & set(props)
    return path if len(overlap) >= 3 and 2 * len(overlap) >= len(names) else None


def mirror_defaults(tree: ast.AST, sections) -> list[tuple[int, str, str]]:
    """Fields of a section-mirroring class that carry a default the schema also gives: (line, Class.field,
    section)."""
    found = []
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        path = mirrored_section(cls, sections)
        if path is None:
            continue
        for stmt in _dataclass_fields(cls):
            node = sections[path].get(stmt.target.id)
            if stmt.value is None or _absent(stmt.value) or not (isinstance(node, dict) and "default" in node):
                continue
            found.append((stmt.lineno, f"{cls.name}.{stmt.target.id}", path))
    return found


def script_entry_points() -> dict[str, set[str]]:
    """module -> names of its functions (``Class.method`` for a method) the workflow's scripts call."""
    out = defaultdict(set)
    for script in sorted(SCRIPTS.glob("*.py")):
        tree = ast.parse(script.read_text(encoding="utf-8"))
        names = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("zsdr"):
                for alias in node.names:
                    names[alias.asname or alias.name] = (node.module, alias.name)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            fn = node.func
            if isinstance(fn, ast.Name) and fn.id in names:
                out[names[fn.id][0]].add(names[fn.id][1])
            elif isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Name) and fn.value.id in names:
                module, name = names[fn.value.id]
                out[module].add(f"{name}.{fn.attr}")      # a class's method (or a module's function)
                out[f"{module}.{name}"].add(fn.attr)
    return out


def keyword_defaults(tree: ast.AST, functions: set[str], defaults) -> list[tuple[int, str, str]]:
    """Keyword defaults of ``functions`` (module-level functions, ``Class.method``) equal to the schema's
    default of a key of the parameter's name: (line, function(param), schema paths)."""
    found = []

    def check(fn, qualname):
        a = fn.args
        positional = a.posonlyargs + a.args
        pairs = list(zip(positional[len(positional) - len(a.defaults):], a.defaults))
        pairs += [(arg, d) for arg, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None]
        for arg, default in pairs:
            ok, value = _literal(default)
            paths = _matches(defaults, arg.arg, value) if ok and not _empty(value) else []
            if paths:
                found.append((default.lineno, f"{qualname}({arg.arg})", ", ".join(paths)))

    for node in getattr(tree, "body", []):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in functions:
            check(node, node.name)
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                        f"{node.name}.{item.name}" in functions
                        or (item.name == "__init__" and node.name in functions)):
                    check(item, f"{node.name}.{item.name}")
    return found


# ------------------------------------------------------------------------------------------- the tests
@pytest.fixture(scope="module")
def schema():
    sections = schema_sections(yaml.safe_load(SCHEMA.read_text(encoding="utf-8")))
    return sections, schema_defaults(sections)


@functools.cache
def _modules() -> tuple[tuple[str, str, ast.Module], ...]:
    """(path under src/zsdr, module name, syntax tree) of every module, parsed once."""
    out = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        module = "zsdr." + rel[:-3].replace("/", ".").removesuffix(".__init__")
        out.append((rel, module, ast.parse(path.read_text(encoding="utf-8"))))
    return tuple(out)


def _report(found, form):
    """The findings not excused, and the PENDING entries of ``form`` that no longer hold."""
    new = [f for f in found if (form, *f[1:4]) not in PENDING]
    held = {(form, *f[1:4]) for f in found}
    stale = sorted(p for p in PENDING if p[0] == form and p not in held)
    return new, stale


def test_no_config_fallback_repeats_a_schema_default(schema):
    _, defaults = schema
    found = []
    for rel, _, tree in _modules():
        for line, key, paths in fallbacks(tree, defaults):
            if (rel, key) not in NOT_CONFIG:
                found.append((f"src/zsdr/{rel}:{line}", rel, key, key, paths))
    for script in sorted(SCRIPTS.glob("*.py")):       # the scripts read their job's values
        rel = script.relative_to(ROOT).as_posix()
        for line, key, paths in fallbacks(ast.parse(script.read_text(encoding="utf-8")), defaults):
            found.append((f"{rel}:{line}", rel, key, key, paths))
    for rules in sorted((ROOT / "rules").glob("*.smk")):   # Snakemake's syntax: the calls themselves parsed
        rel = rules.relative_to(ROOT).as_posix()
        for line, key, paths in rule_fallbacks(rules.read_text(encoding="utf-8"), defaults):
            found.append((f"{rel}:{line}", rel, key, key, paths))
    new, stale = _report(found, "fallback")
    assert not new, "a config default written a second time (the schema fills it; read the key with [...]):\n" + \
        "\n".join(f"  {loc}: .get({key!r}, ...) repeats {paths}" for loc, _, key, _, paths in new)
    assert not stale, f"PENDING entries that are fixed (remove them): {stale}"


def test_dataclasses_mirroring_a_schema_section_carry_no_default_of_it(schema):
    sections, _ = schema
    found = []
    for rel, _, tree in _modules():
        for line, field, path in mirror_defaults(tree, sections):
            if (rel, field.split(".")[1]) not in NOT_CONFIG:
                found.append((f"src/zsdr/{rel}:{line}", rel, field, path.split(".")[-1], path))
    new, stale = _report(found, "dataclass")
    assert not new, ("a dataclass field repeating its schema section's default (the schema fills the section; "
                     "leave the field without one):\n"
                     + "\n".join(f"  {loc}: {field} (schema section {path})" for loc, _, field, _, path in new))
    assert not stale, f"PENDING entries that are fixed (remove them): {stale}"


def test_functions_the_scripts_call_repeat_no_schema_default(schema):
    _, defaults = schema
    entry = script_entry_points()
    assert entry, "no zsdr function called by workflow_scripts/*.py: the scan is broken"
    found = []
    for rel, module, tree in _modules():
        if module in entry:
            for line, what, paths in keyword_defaults(tree, entry[module], defaults):
                found.append((f"src/zsdr/{rel}:{line}", rel, what, what.split("(")[1][:-1], paths))
    new, stale = _report(found, "keyword")
    assert not new, ("a keyword default repeating the schema's default of the value a script passes (the job "
                     "passes it; leave the parameter without one):\n"
                     + "\n".join(f"  {loc}: {what} repeats {paths}" for loc, _, what, _, paths in new))
    assert not stale, f"PENDING entries that are fixed (remove them): {stale}"


def test_the_checks_find_each_form():
    """Each check fires on its form (so the tests above can fail) and leaves the look-alikes alone."""
    sections = {"recipes.<name>.dro": {"kind": {"default": "idro"}, "clusters": {"default": 50},
                                       "rho": {"default": 0.05}, "fraction": {}, "eps": {"default": 0.01},
                                       "seen": {"default": {}}},
                "training": {"loader_workers": {"default": None}, "compile": {"default": False}}}
    defaults = schema_defaults(sections)
    source = ast.parse(
        "a = cfg['dro'].get('clusters', 50)\n"          # repeats the schema: found
        "b = cfg['dro'].get('rho', 0.5)\n"              # another value: not a copy
        "c = cfg.get('compile', False)\n"               # found
        "d = cfg.get('compile', 0)\n"                   # 0 is no False
        "e = cfg.get('loader_workers', None)\n"         # absent
        "f = cfg.setdefault('rho', 0.05)\n"             # found
        "@dataclass\nclass Dro:\n    kind: str = 'idro'\n    clusters: int\n    rho: float = 0.1\n"
        "    fraction: float = 0.25\n    eps: float | None = None\n    seen: dict = field(default_factory=dict)\n"
        "class Small:\n    kind: str = 'idro'\n    rho: float = 0.05\n"  # two fields: no section mirrored
        "def run(spec, clusters=50, rho=1.0, kind='idro'):\n    pass\n"
        "class Task:\n    def __init__(self, clusters=50):\n        pass\n")
    assert [(line, key) for line, key, _ in fallbacks(source, defaults)] == [(1, "clusters"), (3, "compile"),
                                                                             (6, "rho")]
    assert [f for _, f, _ in mirror_defaults(source, sections)] == ["Dro.kind", "Dro.rho"]
    assert [w for _, w, _ in keyword_defaults(source, {"run", "Task"}, defaults)] == ["run(clusters)", "run(kind)",
                                                                                       "Task.__init__(clusters)"]
    assert keyword_defaults(source, {"other"}, defaults) == []
    rule = 'params:\n    k=lambda wc: PLAN.section(wc).get(\n        "clusters", 50\n    ),\n    r=x.get("rho", 1.0)\n'
    assert [(line, key) for line, key, _ in rule_fallbacks(rule, defaults)] == [(2, "clusters")]


def test_the_schema_sections_are_read():
    """The scan sees the sections the config has (a schema reorganised out of its reach would pass vacuously)."""
    sections = schema_sections(yaml.safe_load(SCHEMA.read_text(encoding="utf-8")))
    defaults = schema_defaults(sections)
    assert "rho" in sections["recipes.<name>.dro"] and "loader_workers" in sections["training"]
    assert ("recipes.<name>.dro.clusters", 50) in defaults["clusters"]
    assert len(defaults) > 200

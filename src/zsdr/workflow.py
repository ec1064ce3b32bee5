"""Helpers the Snakefile uses to read and check its config (no Snakemake import here)."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent


def merge_config(base: dict, over: dict) -> dict:
    """``base`` with ``over`` merged in: nested mappings key by key, any other value replaced."""
    out = dict(base)
    for k, v in over.items():
        out[k] = merge_config(base[k], v) if isinstance(v, dict) and isinstance(base.get(k), dict) else v
    return out


# Recipe keys that belong to the recipe itself and are not inherited through ``extends``: which
# system stands for it on datasets of another language.
OWN_KEYS = ("by_language",)


def expand_recipes(config: dict) -> None:
    """Resolve ``extends`` in ``config["recipes"]`` in place: a recipe that extends another is that recipe's
    settings (itself resolved) with its own keys merged over them, nested sections key by key.

    BERM's recipes are their base method plus a loss term (``dpr-berm: {extends: dpr, berm: ...}``),
    so a change to DPR's settings reaches DPR+BERM without a copy. Runs before the schema validation,
    which then sees whole recipes.
    """
    recipes = config.get("recipes") or {}
    done: dict[str, dict] = {}

    def resolve(name: str, chain: tuple[str, ...]) -> dict:
        if name in done:
            return done[name]
        if name not in recipes:
            raise ValueError(f"config key recipes.{chain[-1]}.extends: {name!r} is not a recipe")
        if name in chain:
            raise ValueError(f"config key recipes.{name}.extends: a cycle ({' -> '.join(chain + (name,))})")
        own = dict(recipes[name])
        base = own.pop("extends", None)
        if base:
            inherited = {k: v for k, v in resolve(base, chain + (name,)).items() if k not in OWN_KEYS}
            done[name] = merge_config(inherited, own)
        else:
            done[name] = own
        return done[name]

    for name in list(recipes):
        recipes[name] = resolve(name, ())


def grid_recipe(recipe: str, alpha: float, beta: float) -> str:
    """The recipe of BERM's Figure 4 grid point (alpha = R2 weight, beta = R1 weight)."""
    return f"{recipe}-a{alpha:g}-b{beta:g}"


def expand_berm_grid(config: dict) -> dict[tuple[float, float], str]:
    """Add one recipe per point of ``config["berm"]["grid"]`` (BERM Figure 4) and return
    ``{(alpha, beta): recipe}``. alpha weighs L_R2 and beta L_R1 (the reading under which the paper's
    optimum alpha 0.1, beta 1.0 equals the official ANCE code's weights, docs/methods/berm.md#loss-weights); the point
    equal to the grid recipe's own weights is that recipe, not a second copy of it."""
    grid = (config.get("berm") or {}).get("grid")
    if not grid:
        return {}
    recipes = config["recipes"]
    name = grid["recipe"]
    if name not in recipes or not recipes[name].get("berm"):
        raise ValueError(f"config key berm.grid.recipe: {name!r} must be a recipe with a `berm` term")
    own = recipes[name]["berm"]
    points = {}
    for alpha in grid["alpha"]:
        for beta in grid["beta"]:
            if (alpha, beta) == (own["r2_weight"], own["r1_weight"]):
                points[(alpha, beta)] = name
                continue
            run = grid_recipe(name, alpha, beta)
            recipes.setdefault(run, merge_config(recipes[name], {
                "description": f"BERM Figure 4 grid: {name} with R2 x{alpha:g}, R1 x{beta:g}",
                "berm": {"r1_weight": beta, "r2_weight": alpha}}))
            points[(alpha, beta)] = run
    return points


def sweep_recipe(recipe: str, sweep: str, value: float) -> str:
    """The recipe of one point of COCO-DR's Figure 3 sweeps (``clusters``: K; ``rho``: the update step)."""
    return f"{recipe}-k{int(value)}" if sweep == "clusters" else f"{recipe}-rho{value:g}"


def expand_cocodr_sweeps(config: dict) -> dict[tuple[str, float], str]:
    """Add one recipe per value of ``config["cocodr"]["sweeps"]`` (COCO-DR Figure 3: K, the number of
    query clusters, and rho, the step of iDRO's weight update, through which the paper's temperature
    tau acts: rho = eta / tau) and return ``{(sweep, value): recipe}``; the sweep recipe's own value is
    that recipe itself."""
    sweeps = (config.get("cocodr") or {}).get("sweeps")
    if not sweeps:
        return {}
    recipes = config["recipes"]
    name = sweeps["recipe"]
    if name not in recipes or (recipes[name].get("dro") or {}).get("kind") != "idro":
        raise ValueError(f"config key cocodr.sweeps.recipe: {name!r} must be a recipe with an iDRO `dro` term")
    own = recipes[name]["dro"]
    points = {}
    for sweep, key, default in (("clusters", "clusters", 50), ("rho", "rho", 0.05)):
        for value in [*sweeps.get(sweep, []), own.get(key, default)]:
            if value == own.get(key, default):
                points[(sweep, value)] = name
                continue
            run = sweep_recipe(name, sweep, value)
            recipes.setdefault(run, merge_config(recipes[name], {
                "description": f"COCO-DR Figure 3: {name} with {key} {value:g}",
                "dro": {key: value}}))
            points[(sweep, value)] = run
    return points


# ---------------------------------------------------------------------------------------------
# Config errors a person can act on


class ConfigError(ValueError):
    """A config mistake; ``str()`` is one line per problem, each naming the key and the fix."""


def load_yaml(path: str | Path) -> dict:
    """A YAML config file; a syntax error, or a key given twice in one mapping (YAML keeps the last one
    silently), names the file, line and column."""
    import yaml

    from zsdr.io import safe_yaml

    class Duplicate(Exception):
        pass

    class UniqueKeys:   # a SafeLoader's construct_mapping, refusing a key given twice
        def construct_mapping(self, node, deep=False):
            first = {}
            for key_node, _ in node.value if isinstance(node, yaml.MappingNode) else ():
                if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base`: its keys may be overridden
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    seen = first.setdefault(key, key_node)
                except TypeError:  # an unhashable key: construct_mapping reports it
                    continue
                if seen is not key_node:
                    raise Duplicate(key, seen.start_mark, key_node.start_mark)
            return super().construct_mapping(node, deep)

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the config ({exc})") from None
    try:
        data = safe_yaml(text, UniqueKeys)
    except Duplicate as exc:
        key, first, again = exc.args
        raise ConfigError(f"{path}:{again.line + 1}:{again.column + 1}: key {key!r} is given twice in the same "
                          f"mapping (first on line {first.line + 1}), and YAML keeps only the last (fix: remove "
                          "one of them)") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        context = exc.context
        if context and exc.context_mark and exc.problem_mark and exc.context_mark.line != exc.problem_mark.line:
            context += f" (line {exc.context_mark.line + 1}, column {exc.context_mark.column + 1})"
        what = ", ".join(filter(None, [context, exc.problem]))
        raise ConfigError(f"{where}: YAML syntax error: {what} (fix: correct the line; indent with spaces, "
                          "close every bracket and quote)") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: YAML error: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the config must be a mapping of keys at the top level, got {type(data).__name__}")
    return data


# The config files: config.yaml (what the papers share), then one file per paper (its recipes and
# method section at mini scale, its small- and paper-scale values under `by_scale`), in this order. A
# `by_scale.mini` section holds what only the mini scale has (DDR's Chinese mini track): the top level is
# laid under every scale, so a mini-only recipe there would reach small and paper too.
PAPERS = ("baselines", "berm", "ddr", "modir", "cocodr", "rmsc")
SCALE_SECTIONS = ("mini", "small", "paper")
COMMAND_LINE = "--configfile/--config"


def paper_config_files(root: str | Path) -> list[Path]:
    """The paper files under ``root`` (the workflow folder), in the order the workflow reads them."""
    return [Path(root) / "configs" / "papers" / f"{name}.yaml" for name in PAPERS]


def system_papers(root: str | Path, systems) -> dict[str, str]:
    """``{system: paper}``: the paper file (configs/papers/<paper>.yaml) whose ``recipes`` or ``systems``
    (top level or a ``by_scale`` section) define each of ``systems``; the first file wins. A system none of
    them defines (config.yaml's BM25 and untrained encoders, or one a --configfile adds) is a baseline's."""
    found: dict[str, str] = {}
    for name, path in zip(PAPERS, paper_config_files(root)):
        data = load_yaml(path)
        sections = [data] + [s for s in (data.get("by_scale") or {}).values() if isinstance(s, dict)]
        for section in sections:
            for key in ("recipes", "systems"):
                for system in section.get(key) or {}:
                    found.setdefault(system, name)
    return {s: found.get(s, "baselines") for s in systems}


def update_config(config: dict, over: dict, sources: dict | None = None, label: str = "",
                  _path: tuple = ()) -> dict:
    """Merge ``over`` into ``config`` in place, as Snakemake merges config files (a mapping key by key,
    anything else, a list too, replaces); with ``sources``, record ``label`` for every key it sets."""
    for key, value in over.items():
        if sources is not None:
            sources[(*_path, key)] = label
        if isinstance(value, dict):
            if not isinstance(config.get(key), dict):
                config[key] = {}
            update_config(config[key], value, sources, label, (*_path, key))
        else:
            config[key] = value
    return config


def _scale_sections(path: Path, data: dict) -> dict:
    by_scale = data.pop("by_scale", None) or {}
    if not isinstance(by_scale, dict):
        raise ConfigError(f"{path}: config key by_scale: must map {' and '.join(SCALE_SECTIONS)} to settings")
    for scale, section in by_scale.items():
        if scale not in SCALE_SECTIONS:
            raise ConfigError(f"{path}: config key by_scale.{scale}: not a scale (by_scale holds "
                              f"{', '.join(SCALE_SECTIONS)}; the settings every scale starts from are the file's top level)")
        if not isinstance(section, dict):
            raise ConfigError(f"{path}: config key by_scale.{scale}: must be a mapping of config keys")
    return by_scale


def add_paper_configs(config: dict, root: str | Path, command_line: dict | None = None,
                      command_line_label: str = COMMAND_LINE,
                      overlays: Sequence[tuple[str, dict]] = ()) -> dict[tuple, str]:
    """Lay the paper files over ``config`` in place: ``config`` is config.yaml with the command line's
    ``--configfile``/``--config`` settings (``command_line``) over it, as Snakemake's ``configfile:``
    leaves it. Each paper file's top level goes on first, then, for the scale the config names, each
    file's ``by_scale.<scale>`` section, then the command line again, so the result is config.yaml, the
    paper files, their scale sections and the command line merged in that order: a user's overlay still
    overrides anything. ``overlays`` ((label, settings) pairs, such as the working directory's own
    config.yaml) go on in order under the command line, wherever it does. Returns {key path: the file
    that set it last}, for :func:`check_config`."""
    root = Path(root)
    sources: dict[tuple, str] = {}
    base = root / "config.yaml"
    if base.is_file():
        update_config({}, load_yaml(base), sources, "config.yaml")
    layers = []
    for path in paper_config_files(root):
        data = load_yaml(path)
        name = str(path.relative_to(root))
        layers.append((name, _scale_sections(path, data)))
        update_config(config, data, sources, name)
    over = [*overlays, (command_line_label, command_line or {})]
    for label, settings in over:
        update_config(config, settings, sources, label)
    scale = config.get("scale")
    for name, by_scale in layers:
        if scale in by_scale:
            update_config(config, by_scale[scale], sources, f"{name} by_scale.{scale}")
    for label, settings in over:
        update_config(config, settings, sources, label)
    return sources


def workdir_overlays(root: str | Path, workdir: str | Path) -> list[tuple[str, dict]]:
    """The working directory's own ``config.yaml`` as an overlay of the workflow's config, when the
    workflow runs in another folder than its own (``snakemake -s CHECKOUT/Snakefile --directory DIR``)
    and ``DIR`` has one: ``[(label, settings)]`` for :func:`add_paper_configs`, else ``[]``. The
    workflow's own config.yaml is always the base; a ``config.yaml`` beside the outputs changes what
    it sets, as a ``--configfile`` would, under the command line's ``--configfile``/``--config``."""
    own, here = Path(root) / "config.yaml", Path(workdir) / "config.yaml"
    if not here.is_file():
        return []
    try:
        if here.resolve() == own.resolve() or os.path.samefile(here, own):
            return []
    except OSError:
        pass
    return [(f"{here.resolve()} (the working directory's config.yaml)", load_yaml(here))]


def read_config(root: str | Path, *files: str | Path) -> dict:
    """The config the workflow under ``root`` reads with ``--configfile FILES`` (before ``extends`` is
    resolved and the schema's defaults are filled): config.yaml, the paper files, ``files`` over them."""
    command_line: dict = {}
    for path in files:
        update_config(command_line, load_yaml(path))
    config = update_config(load_yaml(Path(root) / "config.yaml"), command_line)
    add_paper_configs(config, root, command_line)
    return config


def _key_path(parts) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _allowed_keys(schema: dict) -> list[str]:
    return sorted(schema.get("properties", {}))


def _describe_schema_error(error) -> list[tuple[str, tuple]]:
    """One (line, key path) per problem of a jsonschema error."""
    import difflib
    import re

    from jsonschema.exceptions import best_match

    if error.validator in ("anyOf", "oneOf") and error.context:
        deeper = best_match(error.context)
        if deeper is not None and deeper.validator == "additionalProperties":
            error = deeper
    where = _key_path(error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = _allowed_keys(error.schema)
        patterns = list(error.schema.get("patternProperties", {}))
        unknown = [k for k in error.instance
                   if k not in allowed and not any(re.search(p, str(k)) for p in patterns)]
        lines = []
        for key in unknown:
            close = difflib.get_close_matches(str(key), allowed, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}? " if close else ""
            shown = ", ".join(allowed[:60]) + (", ..." if len(allowed) > 60 else "")
            lines.append((f"config key {_key_path([*error.absolute_path, key])}: unknown key ({hint}allowed "
                          f"{'at ' + where if where else 'at the top level'}: {shown})", (*error.absolute_path, key)))
        if lines:
            return lines
    message = error.message
    if len(message) > 300:
        message = message[:300] + " ..."
    expected = error.schema.get("type") if error.validator == "type" else None
    if ("boolean" in ([expected] if isinstance(expected, str) else expected or [])
            and isinstance(error.instance, str) and error.instance.lower() in ("true", "false", "yes", "no")):
        # Snakemake's --config reads only True / False as booleans: `--config warm_start=false` is text
        value = "True" if error.instance.lower() in ("true", "yes") else "False"
        message += f" (fix: on the command line, --config {where}={value}; in a YAML file, {where.split('.')[-1]}: " \
                   f"{value.lower()})"
    return [(f"config key {where or '(top level)'}: {message}", tuple(error.absolute_path))]


def _fold_inherited(lines: list[str]) -> list[str]:
    """One line for a mistake that ``extends`` copied into several recipes, naming the others."""
    import re

    first: dict[str, int] = {}
    also: dict[int, list[str]] = {}
    out: list[str] = []
    for line in lines:
        m = re.match(r"config key recipes\.([^.:\[]+)", line)
        if not m:
            out.append(line)
            continue
        name = m.group(1)
        shape = line.replace(f"recipes.{name}", "recipes.*")
        if shape in first:
            also[first[shape]].append(name)
            continue
        first[shape] = len(out)
        also[len(out)] = []
        out.append(line)
    for i, names in also.items():
        if names:
            out[i] += f" (also in recipes {', '.join(names)}, through `extends`)"
    return out


def _set_in(parts, sources: dict[tuple, str]) -> str:
    """`` (set in FILE)`` for the file that set config key ``parts`` (or the nearest key above it)."""
    parts = tuple(parts)
    for n in range(len(parts), 0, -1):
        if parts[:n] in sources:
            above = "" if n == len(parts) else f"{_key_path(parts[:n])} "
            return f" ({above}set in {sources[parts[:n]]})"
    return ""


def config_schema(schema_path: str | Path) -> dict:
    """The config schema the workflow validates against: the schema file with the registries laid over it, so
    a new base loss or loss term needs no schema edit. ``recipes.<name>.loss`` offers exactly the base losses
    of :mod:`zsdr.training.loss_registry`; every loss term of :mod:`zsdr.training.term_registry` whose section
    the file does not write out gets the section its dataclass gives
    (:func:`zsdr.training.term_sections.section_schema`), and any other key stays unknown."""
    from zsdr.io import safe_yaml
    from zsdr.training.loss_registry import LOSSES
    from zsdr.training.term_registry import TERMS
    from zsdr.training.term_sections import TermSourceError, section_schema

    path = Path(schema_path)
    try:
        schema = safe_yaml(path.read_text(encoding="utf-8"))
        recipe = schema["properties"]["recipes"]["additionalProperties"]["properties"]
    except (OSError, KeyError, TypeError) as exc:
        raise ConfigError(f"{path}: not the workflow's config schema ({exc!r} missing; fix: restore the file from "
                          "the checkout)") from None
    recipe["loss"] = {**recipe.get("loss", {}), "enum": list(LOSSES)}
    for name in TERMS:
        if name not in recipe:
            try:
                recipe[name] = section_schema(name)
            except TermSourceError as exc:
                raise ConfigError(f"{exc} (fix: the line of zsdr.training.term_registry.TERMS must name a term "
                                  "class whose `config_class` is a dataclass)") from None
    return schema


SCHEMA_FILE = Path(__file__).resolve().parents[2] / "schemas" / "config.schema.yaml"
"""The config schema of this checkout (the one place a config default is written)."""


def section_defaults(section: str, schema_path: str | Path = SCHEMA_FILE) -> dict:
    """The defaults the config schema gives the keys of ``section`` (a key path, ``<name>`` for an entry of a
    map: ``recipes.<name>.dro``, ``training``): what the workflow fills into every config, and so into every
    spec and job, for code that writes a section by hand (tests, benchmarks, a notebook calling the library).
    A key without a default is left out."""
    import copy

    schema = config_schema(schema_path)
    node = schema
    for part in section.split("."):
        while "$ref" in node:
            node = schema["$defs"][node["$ref"].removeprefix("#/$defs/")]
        try:
            node = node["additionalProperties"] if part == "<name>" else node["properties"][part]
        except (KeyError, TypeError):
            raise ValueError(f"{schema_path}: no config section {section!r} (at {part!r})") from None
    while "$ref" in node:
        node = schema["$defs"][node["$ref"].removeprefix("#/$defs/")]
    return {k: copy.deepcopy(v["default"]) for k, v in (node.get("properties") or {}).items()
            if isinstance(v, dict) and "default" in v}


def check_config(config: dict, schema_path: str | Path, sources: dict[tuple, str] | None = None) -> None:
    """Validate ``config`` against the JSON schema; raise :class:`ConfigError` with one short line per
    problem (the key path, what is wrong, for an unknown key the allowed names and the nearest one),
    instead of jsonschema's dump of the whole schema. With ``sources`` (:func:`add_paper_configs`), each
    line ends with the file that set the key."""
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(config_schema(schema_path))
    errors = sorted(validator.iter_errors(config), key=lambda e: [str(p) for p in e.absolute_path])
    if errors:
        keys: dict[str, tuple] = {}   # each line and the key it names
        for e in errors:
            for line, parts in _describe_schema_error(e):
                keys.setdefault(line, parts)
        lines = _fold_inherited(list(keys))
        if sources:
            lines = [line + _set_in(keys.get(line.split(" (also in recipes ")[0], ()), sources) for line in lines]
        raise ConfigError("invalid config:\n" + "\n".join(lines[:20])
                          + (f"\n... and {len(lines) - 20} more" if len(lines) > 20 else ""))


# ---------------------------------------------------------------------------------------------
# Models that must be on this machine (offline: true)


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache: ``HF_HUB_CACHE``, else ``HF_HOME/hub``, else ``~/.cache/huggingface/hub``."""
    import os

    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or Path(os.environ.get("XDG_CACHE_HOME", "~/.cache")) / "huggingface"
    return Path(home).expanduser() / "hub"


def offline_model_problem(ref: str) -> str | None:
    """None when model ``ref`` loads without the network (an existing path, or a Hugging Face id with a
    snapshot in the local cache); otherwise what is wrong with it."""
    if Path(ref).expanduser().exists():
        return None
    cache = hub_cache_dir()
    if ref.count("/") > 1 or ref.startswith((".", "/", "~")) or not ref.strip():
        return "not an existing folder (and not a Hugging Face id)"
    snapshots = cache / f"models--{ref.replace('/', '--')}" / "snapshots"
    if snapshots.is_dir() and any(s.is_dir() and any(s.iterdir()) for s in snapshots.iterdir()):
        return None
    return f"neither a folder nor a Hugging Face id in the local cache ({cache})"


def config_keys_with(config, value, path=()) -> list[str]:
    """Dotted config keys whose value is ``value`` (to name where a model reference came from)."""
    found = []
    if isinstance(config, dict):
        for k, v in config.items():
            found += config_keys_with(v, value, (*path, k))
    elif isinstance(config, list):
        for i, v in enumerate(config):
            found += config_keys_with(v, value, (*path, i))
    elif config == value:
        found.append(_key_path(path))
    return found


def check_offline_model(ref: str, config: dict, problem_of=offline_model_problem) -> None:
    """With ``offline: true``, raise :class:`ConfigError` naming the config key of a model reference
    that is not on this machine (a typo would otherwise fail minutes later inside a job)."""
    problem = problem_of(ref)
    if problem is None:
        return
    import difflib

    keys = config_keys_with(config, ref) or ["(a model reference)"]
    names = [*(config.get("backbones") or {}), *(config.get("recipes") or {}), *(config.get("cross_encoders") or {}),
             *(config.get("readers") or {}), *((config.get("cocodr") or {}).get("pretrained") or {})]
    close = difflib.get_close_matches(ref, [n for n in names if n != ref], n=1, cutoff=0.75)
    problem += f" (did you mean {close[0]!r}?)" if close else ""
    raise ConfigError(f"config key {', '.join(keys[:3])}: model {ref!r} is {problem}; with `offline: true` a model "
                      "must be a configured backbone, recipe, pretrained model or cross-encoder, a folder, or a "
                      f"Hugging Face id already downloaded (fix: correct the name, download it once with "
                      f"`huggingface-cli download {ref}`, or set `offline: false`)")


def check_model_reference(ref: str, config: dict, offline: bool) -> None:
    """A model the DAG does not build: a folder must hold a loadable model (``config.json``, complete
    weights: :func:`zsdr.models.checkpoints.check_model_folder`); with ``offline`` anything else must be in the local
    Hugging Face cache (:func:`check_offline_model`). Raises :class:`ConfigError` naming the config key."""
    from zsdr.models.checkpoints import check_model_folder
    from zsdr.io import DataError

    if Path(ref).expanduser().is_dir():
        try:
            check_model_folder(Path(ref).expanduser(), "the model")
        except DataError as err:
            keys = config_keys_with(config, ref) or ["(a model reference)"]
            raise ConfigError(f"config key {', '.join(keys[:3])}: {err}") from None
    elif offline:
        check_offline_model(ref, config)


def _wait_for_the_job(signum, frame) -> None:
    print(
        f"{signal.Signals(signum).name} received: waiting for the running job to checkpoint and stop",
        file=sys.stderr,
        flush=True,
    )


def wait_for_the_job_on_sigusr1() -> None:
    """Keep this (Snakemake) process alive through SIGUSR1, waiting for the job it runs.

    Inside a SLURM job each rule runs in a Snakemake process under srun. The warning SLURM sends before
    a time limit (sbatch --signal=USR1@300, profiles/slurm) reaches every process of that step: the
    Snakemake process would die of it (SIGUSR1's default action) and the step with it, killing the
    training script before it could write its checkpoint. A handler keeps the process waiting for the
    script instead; the script checkpoints, exits 128 + 10, the job fails and its retry resumes. (A
    handler, not SIG_IGN: the scripts started from here must not inherit an ignored SIGUSR1.)
    """
    try:
        signal.signal(signal.SIGUSR1, _wait_for_the_job)
    except ValueError:  # not the main thread
        pass


def temp_unless(keep: bool, output):
    """A rule's ``output`` as given when ``keep``, else temporary: Snakemake removes it once every job
    reading it is done (e.g. `dense.keep_embeddings: false`: embeddings go once searched and mined)."""
    if keep:
        return output
    from snakemake.io import temp

    return temp(output)


def site_problems(dag, site) -> list[str]:
    """What the submissions of a cluster run ask beyond ``site`` (:class:`zsdr.plan.site.Site`), one line
    each: ``dag`` is Snakemake's, whose jobs and group jobs (``get_jobs_or_groups``) become the sbatch calls,
    each asking its resources as the SLURM executor turns them into options (GPUs, nodes, CPUs per GPU of a
    GPU job else its threads, memory, runtime). Only a job that is one training may span nodes."""
    out = []
    for sub in dag.get_jobs_or_groups():
        group = sub.is_group()
        if not group and not dag.needrun(sub):
            continue
        r = sub.resources
        gpus, nodes = int(r.get("gpu", 0) or 0), int(r.get("nodes", 1) or 1)
        per_gpu = r.get("cpus_per_gpu")
        cpus = gpus * int(per_gpu) if gpus and per_gpu else int(sub.threads)
        what = f"group job {sub.groupid} ({len(list(sub.jobs))} jobs)" if group else f"job {sub}"
        out += site.problems(what, nodes=nodes, gpus=gpus, cpus=cpus, mem_mb=r.get("mem_mb"),
                             runtime=r.get("runtime"), multi_node=not group and bool(r.get("mpi")))
    return out

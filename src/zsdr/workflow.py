"""Helpers the Snakefile uses to build its targets (no Snakemake import here).

:func:`code_files` maps ``zsdr`` module names to their source files so a rule can list the
library code it runs among its inputs: Snakemake's code trigger only sees a rule's own script,
and an edit to, say, a loss function must re-plan exactly the jobs that use it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent


def code_files(*modules: str, root: str | Path | None = None) -> list[str]:
    """Source files of the given ``zsdr`` modules (a package stands for all its files), sorted.

    Paths are relative to ``root`` (the workflow folder) when given, so the DAG is location-free.
    """
    files: set[Path] = set()
    for name in modules:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise ValueError(f"no module named {name!r}")
        origin = Path(spec.origin)
        if origin.name == "__init__.py" and spec.submodule_search_locations:
            files.update(origin.parent.rglob("*.py"))
        else:
            files.add(origin)
    out = []
    for f in sorted(files):
        out.append(str(f.relative_to(Path(root).resolve())) if root else str(f))
    return out


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(base[k], v) if isinstance(v, dict) and isinstance(base.get(k), dict) else v
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
            done[name] = _merge(inherited, own)
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
    optimum alpha 0.1, beta 1.0 equals the official ANCE code's weights, METHODS.md §1.2); the point
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
            if (alpha, beta) == (own.get("r2_weight", 0.1), own.get("r1_weight", 1.0)):
                points[(alpha, beta)] = name
                continue
            run = grid_recipe(name, alpha, beta)
            recipes.setdefault(run, _merge(recipes[name], {
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
    if name not in recipes or (recipes[name].get("dro") or {}).get("kind", "idro") != "idro":
        raise ValueError(f"config key cocodr.sweeps.recipe: {name!r} must be a recipe with an iDRO `dro` term")
    own = recipes[name]["dro"]
    points = {}
    for sweep, key, default in (("clusters", "clusters", 50), ("rho", "rho", 0.05)):
        for value in [*sweeps.get(sweep, []), own.get(key, default)]:
            if value == own.get(key, default):
                points[(sweep, value)] = name
                continue
            run = sweep_recipe(name, sweep, value)
            recipes.setdefault(run, _merge(recipes[name], {
                "description": f"COCO-DR Figure 3: {name} with {key} {value:g}",
                "dro": {key: value}}))
            points[(sweep, value)] = run
    return points

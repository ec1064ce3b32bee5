"""One job object per rule: what a rule's job does, built by the plan from the config and the job's wildcards.

Every rule's ``params`` are the fields of one frozen dataclass (a :class:`RuleJob`), built by the function
registered for the rule with :func:`builds`::

    @dataclass(frozen=True)
    class Bm25Job(RuleJob):
        dataset: str
        ...

    @builds(Bm25Job, "bm25")
    def bm25_job(plan, wc) -> Bm25Job:
        return Bm25Job(dataset=f"{plan.paths.data}/{wc.dataset}", ...)

in this package's module named for the rule file (zsdr.plan.jobs.sparse for rules/sparse.smk),
and the rule reads it whole, ``params: **PLAN.params("bm25")`` (:meth:`zsdr.plan.core.Plan.params`), so that
Snakemake records each field as a param (a changed field reruns the job; a value whose ``repr`` leaves
cosmetic keys out, zsdr.plan.params, as before). The job's script hands ``snakemake.params`` (the job's fields
by name) to one library function, and imports nothing of the plan: a job's code stamp (zsdr.plan.code) lists the
library it runs, and the job's values are compared as its params. No rule reads the config: a setting travels
config -> the plan's builder -> the job's field -> the library function.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from types import SimpleNamespace
from typing import Any


@dataclass(frozen=True)
class RuleJob:
    """Base of every rule's job object: its fields are the rule's params, one for one."""

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]


Builder = Callable[[Any, Any], RuleJob]
BUILDERS: dict[str, tuple[type[RuleJob], Builder]] = {}
"""rule name -> (its job class, the function that builds its job from the plan and the wildcards)."""


def builds(job_class: type[RuleJob], *rules: str) -> Callable[[Builder], Builder]:
    """Register the decorated ``function(plan, wildcards) -> job_class`` as the builder of ``rules``' jobs."""

    def register(function: Builder) -> Builder:
        for rule in rules:
            if rule in BUILDERS and BUILDERS[rule][1] is not function:
                raise ValueError(f"rule {rule}: two job builders ({BUILDERS[rule][1].__qualname__}, "
                                 f"{function.__qualname__})")
            BUILDERS[rule] = (job_class, function)
        return function

    return register


def wildcards_of(wc: Any) -> SimpleNamespace:
    """A job's wildcards as a plain namespace (Snakemake's ``Wildcards``, a mapping, or a namespace)."""
    if wc is None:
        return SimpleNamespace()
    if isinstance(wc, SimpleNamespace):
        return wc
    if isinstance(wc, Mapping):
        return SimpleNamespace(**{str(k): v for k, v in wc.items()})
    if hasattr(wc, "items"):
        return SimpleNamespace(**dict(wc.items()))
    return SimpleNamespace(**vars(wc))


def load_builders() -> None:
    """Import every module of this package (each registers the jobs of one rule file, rules/<name>.smk)."""
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")


def builder(rule: str) -> tuple[type[RuleJob], Builder]:
    if rule not in BUILDERS:
        load_builders()
    try:
        return BUILDERS[rule]
    except KeyError:
        raise ValueError(f"rule {rule} has no job builder: register one with zsdr.plan.jobs.builds") from None


def job_fields(job: RuleJob) -> dict[str, Any]:
    """A job's fields, in their declared order (not copied: a field's value is what the rule's param holds)."""
    return {f.name: getattr(job, f.name) for f in fields(job)}

"""Params that mean results: what a job's params show Snakemake, which reruns a job whose params changed.

Snakemake records each job's params as the ``repr`` of every plain value (strings, numbers, lists, dicts) and
plans a job again when one differs from the recorded value. A training's spec also carries text and settings
that cannot change a number it computes — its description and provenance, how often it logs and saves a
checkpoint (a resumed run continues exactly where it stopped), how many batch-preparing workers it runs, whether
embeddings are kept once read — and a rewording or a log interval must not retrain a model (at paper scale, days
of 8-GPU jobs). :class:`Settings` is the spec itself (the job reads every key) whose ``repr`` leaves those keys
out; :class:`Labels` a ``{name: text}`` mapping whose text is shown, not compared; zsdr.plan.summary.Note a
message Snakemake does not compare at all; :class:`Handling` settings of how a job reaches its inputs (where it
downloads from, how long it waits, how often it retries, where the downloads are kept) that cannot change a byte of
what it writes, not compared either.
"""

from __future__ import annotations

from typing import Any

COSMETIC = frozenset({
    "description",      # prose about a recipe, system, model or generator
    "provenance",       # where a setting comes from ([P], [C], [X] tags)
    "checksum_from",    # download: where a file's checksum comes from (the checksum itself is compared)
    "log_every",        # training: a loss line every N steps
    "save_every",       # training: a checkpoint every N steps (a resumed run continues to the same weights)
    "workers",          # training launch: batch-preparing worker processes
    "keep_embeddings",  # dense: embeddings kept or removed once read
})
"""Keys that cannot change a number a job computes, at any depth of a params value."""


def meaningful(value: Any) -> Any:
    """``value`` as plain data without the :data:`COSMETIC` keys (at any depth)."""
    if isinstance(value, Labels):
        return list(value)
    if isinstance(value, dict):
        return {k: meaningful(v) for k, v in value.items() if k not in COSMETIC}
    if isinstance(value, list):
        return [meaningful(v) for v in value]
    if isinstance(value, tuple):
        return tuple(meaningful(v) for v in value)
    return value


class Settings(dict):
    """A job's settings (a dict the job reads whole) whose ``repr``, what Snakemake compares for reruns, leaves
    out the :data:`COSMETIC` keys."""

    __slots__ = ()

    def __repr__(self) -> str:
        return repr(meaningful(dict(self)))

    def __reduce__(self):
        return (Settings, (dict(self),))


class Labels(dict):
    """``{name: text}`` a job shows (e.g. each system's description in a table's legend): the names are compared
    for reruns, the text is not."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Labels({list(self)!r})"

    def __reduce__(self):
        return (Labels, (dict(self),))


class Handling:
    """Settings of how a job does its work that cannot change a byte of what it writes — a download's mirror,
    timeout and retries (its checksum decides what is kept), the folder the downloads are kept in (the files
    themselves are the job's inputs) — read like a dict, and not compared for reruns: Snakemake's params check
    compares plain data (strings, numbers, lists, dicts) and skips other objects, so pointing the downloads at
    a mirror, or waiting longer, reruns nothing (tests/test_params.py)."""

    __slots__ = ("values",)

    def __init__(self, values: dict[str, Any]) -> None:
        self.values = dict(values)

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def __repr__(self) -> str:
        return f"Handling({self.values!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Handling) and other.values == self.values

    def __hash__(self) -> int:
        return hash(repr(self))

    def __reduce__(self):
        return (Handling, (self.values,))

"""The weak pairs of one document (:mod:`zsdr.training.weak`: Randomness, Distinct pairs): pair ``k`` of the
document at position ``index`` drawn from its own generator (:func:`pair_rng`), by the inverse cloze task
(:func:`ict_pair`) or from two spans (:func:`scl_pair`), redrawn while it repeats an earlier pair of the
document (:class:`DocumentDraws`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Callable, Hashable

import numpy as np

_PAIR_STREAM = 1   # fourth seed word of the pair generators (see zsdr.training.weak)


def pair_rng(seed: int, index: int, k: int) -> np.random.Generator:
    """The generator of pair ``k`` of the document at position ``index``."""
    return np.random.default_rng([int(seed), int(index), int(k), _PAIR_STREAM])


def ict_pair(sentences: Sequence[str], rng: np.random.Generator,
             keep_probability: float = 0.1) -> tuple[str, str] | None:
    """``(query, context)`` of the inverse cloze task, ``None`` for fewer than two sentences.

    The query is a sentence picked uniformly (``rng.integers``); the context is the other sentences
    in order, joined by a space, or with probability ``keep_probability`` (one ``rng.random()``,
    always drawn) all the sentences, the query left in place.
    """
    if not 0.0 <= keep_probability <= 1.0:
        raise ValueError(f"keep_probability {keep_probability} must lie in [0, 1]")
    if len(sentences) < 2:
        return None
    i = int(rng.integers(len(sentences)))
    keep = rng.random() < keep_probability
    context = list(sentences) if keep else [*sentences[:i], *sentences[i + 1:]]
    return sentences[i], " ".join(context)


def scl_pair(spans: Sequence[str], rng: np.random.Generator) -> tuple[str, str] | None:
    """``(query, positive)``: two distinct spans (distinct texts; repeated spans count once) drawn
    without replacement, ``None`` when there are fewer than two."""
    unique = list(dict.fromkeys(spans))
    if len(unique) < 2:
        return None
    a, b = rng.choice(len(unique), size=2, replace=False)
    return unique[int(a)], unique[int(b)]


class DocumentDraws:
    """The distinct pairs of one document, drawn one at a time: :meth:`next` gives pair ``k`` (``k`` = the
    pairs given so far) from :func:`pair_rng` ``(seed, index, k)``, redrawn from that stream while its key
    repeats an earlier pair's, or ``None`` once the document has no distinct pair left. ``draw``: one
    pair from a generator; ``key``: what makes two pairs the same; ``options``: how many keys exist."""

    def __init__(self, draw: Callable[[np.random.Generator], tuple[str, str]],
                 key: Callable[[tuple[str, str]], Hashable], options: int, seed: int, index: int):
        self.draw, self.key, self.options = draw, key, int(options)
        self.seed, self.index = int(seed), int(index)
        self.seen: set = set()

    @property
    def given(self) -> int:
        return len(self.seen)

    @property
    def exhausted(self) -> bool:
        return len(self.seen) >= self.options

    def next(self) -> tuple[str, str] | None:
        if self.exhausted:
            return None
        rng = pair_rng(self.seed, self.index, len(self.seen))
        pair = self.draw(rng)
        while self.key(pair) in self.seen:  # ends: fewer keys are taken than exist, each has a positive chance
            pair = self.draw(rng)
        self.seen.add(self.key(pair))
        return pair


def ict_draws(sentences: Sequence[str], seed: int, index: int, keep_probability: float = 0.1) -> DocumentDraws:
    """The ICT pairs of one document with distinct query sentences (none for fewer than two sentences)."""
    sentences = list(sentences)
    options = len(set(sentences)) if len(sentences) >= 2 else 0
    return DocumentDraws(lambda rng: ict_pair(sentences, rng, keep_probability), lambda p: p[0], options, seed, index)


def scl_draws(spans: Sequence[str] | None, seed: int, index: int) -> DocumentDraws:
    """The SCL pairs of one document, no two with the same two spans in either role (none for fewer than
    two distinct spans)."""
    unique = list(dict.fromkeys(spans or ()))
    options = len(unique) * (len(unique) - 1) // 2
    return DocumentDraws(lambda rng: scl_pair(unique, rng), frozenset, options, seed, index)


def _take(draws: DocumentDraws, count: int) -> list[tuple[str, str]]:
    out = []
    while len(out) < int(count) and (pair := draws.next()) is not None:
        out.append(pair)
    return out


def ict_pairs(sentences: Sequence[str], count: int, seed: int, index: int,
              keep_probability: float = 0.1) -> list[tuple[str, str]]:
    """Up to ``count`` ICT pairs of one document with distinct query sentences (one per distinct
    sentence at most); none for fewer than two sentences."""
    return _take(ict_draws(sentences, seed, index, keep_probability), count)


def scl_pairs(spans: Sequence[str] | None, count: int, seed: int, index: int) -> list[tuple[str, str]]:
    """Up to ``count`` SCL pairs of one document, no two with the same two spans (in either role)."""
    return _take(scl_draws(spans, seed, index), count)

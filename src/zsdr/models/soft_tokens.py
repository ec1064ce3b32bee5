"""RMSC's soft tokens: learnt domain and relevance markers around every input of the bi-encoder.

RMSC (Fang et al., AAAI 2024) adds ``k`` new tokens per slot to the vocabulary, randomly
initialised: domain tokens ``[S]`` (source) / ``[T]`` (target) and relevance tokens ``[H]``
(human labels) / ``[W]`` (weak supervision). An input becomes
``[CLS] <domain tokens> x <relevance tokens> [SEP]`` (``<s> ... </s>`` for RoBERTa). Training
mixes source supervised ``[S] x [H]``, source weak ``[S] x [W]`` and target weak ``[T] x [W]``;
inference on the target uses ``[T] x [H]``, the default :attr:`SoftTokens.inference` context.

:class:`SoftTokens` only names the tokens and validates the settings (stored as
``EncoderConfig.soft_tokens``, i.e. in ``zsdr.json``); :meth:`zsdr.models.encoder.Encoder.add_soft_tokens`
adds them to a tokenizer and backbone, and the encoder's tokenisation places them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from zsdr.io import DataError

DOMAINS = {"source": "S", "target": "T"}
RELEVANCES = {"human": "H", "weak": "W"}
LETTERS = ("S", "T", "H", "W")  # the order of all_tokens()
_FIX = "soft_tokens is {\"k\": tokens per slot (an integer >= 1), \"inference\": [domain, relevance]}; " \
       "add soft tokens with Encoder.add_soft_tokens, not by editing zsdr.json"


def _check_context(domain, relevance) -> None:
    if domain not in DOMAINS:
        raise ValueError(f"unknown domain {domain!r} (expected one of {', '.join(DOMAINS)})")
    if relevance not in RELEVANCES:
        raise ValueError(f"unknown relevance {relevance!r} (expected one of {', '.join(RELEVANCES)})")


@dataclass(frozen=True)
class SoftTokens:
    """``k`` tokens per slot (domain ``[S]``/``[T]``, relevance ``[H]``/``[W]``) and the context used
    when an input is given none (``inference``, a ``(domain, relevance)`` pair).

    Token strings are ``[S]`` for ``k == 1`` and ``[S1]``, ``[S2]``, ... for ``k > 1`` (likewise T, H, W).
    """

    k: int = 1
    inference: tuple[str, str] = ("target", "human")

    def __post_init__(self):
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
            raise ValueError(f"k must be an integer >= 1, got {self.k!r}")
        context = self.inference
        if not isinstance(context, (tuple, list)) or len(context) != 2:
            raise ValueError(f"inference must be a (domain, relevance) pair, got {context!r}")
        _check_context(*context)
        object.__setattr__(self, "inference", tuple(context))

    def _strings(self, letter: str) -> list[str]:
        return [f"[{letter}]"] if self.k == 1 else [f"[{letter}{i}]" for i in range(1, self.k + 1)]

    def tokens(self, domain: str, relevance: str) -> tuple[list[str], list[str]]:
        """The domain tokens (before the text) and relevance tokens (after it) of a context."""
        _check_context(domain, relevance)
        return self._strings(DOMAINS[domain]), self._strings(RELEVANCES[relevance])

    def all_tokens(self) -> list[str]:
        """Every token string, S, T, H then W (the order they are added to the vocabulary)."""
        return [s for letter in LETTERS for s in self._strings(letter)]

    def contexts(self) -> list[tuple[str, str]]:
        """The four (domain, relevance) contexts."""
        return [(d, r) for d in DOMAINS for r in RELEVANCES]

    def to_dict(self) -> dict:
        """JSON-ready settings (``inference`` as a list), as ``EncoderConfig.soft_tokens`` holds them."""
        return {"k": self.k, "inference": list(self.inference)}

    @classmethod
    def from_dict(cls, data: dict, path: str | os.PathLike | None = None) -> "SoftTokens":
        """Validated settings; unknown keys or bad values raise :class:`DataError` naming ``path``."""
        if isinstance(data, SoftTokens):
            return data
        if not isinstance(data, dict):
            raise DataError(path, None, f"soft_tokens must be an object, got {type(data).__name__}", _FIX)
        known = {"k", "inference"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise DataError(path, None, f"unknown soft_tokens settings {unknown}", _FIX)
        try:
            return cls(**data)
        except (ValueError, TypeError) as exc:
            raise DataError(path, None, f"soft_tokens: {exc}", _FIX) from None

"""BM25 of a query against the sentence units of one passage (BERM's ``bm25(q, u_i)``).

Collection statistics (document frequencies, number of documents, average length) are computed
once over a named *collection* and saved (:meth:`UnitBM25.save`), then every labelling shard
scores its pairs with the same statistics:

* ``units``: every sentence unit of the labelled passages is a document (BM25 at unit level,
  the paper's reading; docs/methods/berm.md#unit-bm25);
* ``passages``: the labelled passages themselves are the documents (unit lengths still normalise);
* ``pairs``: the queries and the positive passages of the labelled pairs, ``N = 2 × pairs`` (what the
  official code counts its idf over, docs/methods/berm.md#unit-bm25 [C]).

Two formulas (``variant``):

* ``lucene``: Lucene/Anserini BM25, ``idf(w) = ln(1 + (N - df + 0.5) / (df + 0.5))`` times
  ``tf / (tf + k1 (1 - b + b |u| / avgdl))``, once per query-token occurrence (k1 0.9, b 0.4);
* ``approximate``: the official code's (docs/methods/berm.md#unit-bm25 ⚠ [C]): ``Σ_{w ∈ q, w ∈ u} idf(w) · (k1 + 1) / k1 ·
  (1 - b + b |u| / 100)`` with ``idf(w) = ln(N / (df(w) + 1))``, 15 for an unseen token, no term-frequency
  saturation (k1 1.5, b 0.75).

Tokens are lower-cased ``\\w+`` words (:func:`zsdr.data.bm25.simple_tokenize`), or any
callable (the code counted the encoder tokenizer's word pieces).
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from typing import Callable, Iterable, Sequence

from zsdr.data.bm25 import simple_tokenize
from zsdr.io import atomic_write, read_json

VARIANTS = ("lucene", "approximate")
COLLECTIONS = ("units", "passages", "pairs")
UNSEEN_IDF = 15.0     # the official code's idf of a token it never counted
CODE_AVG_LENGTH = 100.0


class UnitBM25:
    def __init__(self, df: dict[str, int], n_docs: int, avgdl: float, *, variant: str = "lucene", k1: float = 0.9,
                 b: float = 0.4, tokenize: Callable[[str], list[str]] = simple_tokenize):
        if variant not in VARIANTS:
            raise ValueError(f"unit BM25 variant {variant!r}: expected one of {', '.join(VARIANTS)}")
        self.df, self.n_docs, self.avgdl = df, int(n_docs), float(avgdl)
        self.variant, self.k1, self.b, self.tokenize = variant, float(k1), float(b), tokenize

    @classmethod
    def count(cls, documents: Iterable[str], tokenize: Callable[[str], list[str]] = simple_tokenize,
              **kwargs) -> "UnitBM25":
        """Statistics of ``documents`` (each string is one document of the collection)."""
        df: Counter = Counter()
        n = total = 0
        for text in documents:
            toks = tokenize(text)
            df.update(set(toks))
            n += 1
            total += len(toks)
        return cls(dict(df), n, total / max(n, 1), tokenize=tokenize, **kwargs)

    def idf(self, term: str) -> float:
        df = self.df.get(term)
        if self.variant == "approximate":
            return UNSEEN_IDF if df is None else math.log(self.n_docs / (df + 1))
        df = df or 0
        return math.log1p((self.n_docs - df + 0.5) / (df + 0.5))

    def score(self, query: str, units: Sequence[str]) -> list[float]:
        """``bm25(query, u)`` for every unit."""
        q = self.tokenize(query)
        idf = {w: self.idf(w) for w in set(q)}
        out = []
        for unit in units:
            toks = self.tokenize(unit)
            tf = Counter(toks)
            if self.variant == "approximate":
                norm = (self.k1 + 1) / self.k1 * (1 - self.b + self.b * len(toks) / CODE_AVG_LENGTH)
                out.append(sum(idf[w] * norm for w in q if w in tf))
                continue
            denom = self.k1 * (1 - self.b + self.b * len(toks) / max(self.avgdl, 1e-9))
            out.append(sum(idf[w] * tf[w] / (tf[w] + denom) for w in q if w in tf))
        return out

    def save(self, path: str | os.PathLike, **info) -> None:
        with atomic_write(path) as fh:
            json.dump({"n_docs": self.n_docs, "avgdl": self.avgdl, **info, "df": self.df}, fh)

    @classmethod
    def load(cls, path: str | os.PathLike, **kwargs) -> "UnitBM25":
        data = read_json(path, "compute the statistics again (the unit_stats rule)")
        return cls(data["df"], data["n_docs"], data["avgdl"], **kwargs)

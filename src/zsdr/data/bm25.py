"""An in-memory BM25 over small collections (sparse matrices, no JVM).

Used where a full Lucene index is overkill: mining hard negatives inside the mini benchmark
generator (hence its place among the data modules, below the retrieval layers) and scoring sentence
units of a single passage (:mod:`zsdr.sparse.unit_bm25`). Scores follow Lucene's BM25
(``idf = ln(1 + (N - df + 0.5) / (df + 0.5))``, term weight ``tf / (tf + k1 (1 - b + b dl/avgdl))``),
the formula Anserini uses; the large-scale runs of the pipeline go through pyserini.
"""

from __future__ import annotations

import re
from typing import Callable, Iterable, Sequence

import numpy as np
import scipy.sparse as sp

_TOKEN = re.compile(r"\w+", re.UNICODE)


def simple_tokenize(text: str) -> list[str]:
    """Lower-cased word tokens (``\\w+``)."""
    return _TOKEN.findall(text.lower())


_CJK_OR_WORD = re.compile(r"([\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+)|([^\W\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+)")


def cjk_tokenize(text: str) -> list[str]:
    """Tokens as Lucene's CJKAnalyzer (Anserini's ``-language zh``) makes them: every run of Han characters as
    its overlapping bigrams (a lone character as itself), every other ``\\w+`` run as one lower-cased word.
    Chinese has no spaces between words, so :func:`simple_tokenize` reads a whole sentence as one token."""
    out: list[str] = []
    for han, word in _CJK_OR_WORD.findall(text.lower()):
        if word:
            out.append(word)
        elif len(han) == 1:
            out.append(han)
        else:
            out.extend(han[i:i + 2] for i in range(len(han) - 1))
    return out


class BM25:
    """BM25 index over ``docs`` (a sequence of strings); ids are positions unless ``ids`` is given."""

    def __init__(self, docs: Sequence[str], ids: Sequence[str] | None = None, k1: float = 0.9, b: float = 0.4,
                 tokenize: Callable[[str], list[str]] = simple_tokenize):
        self.k1, self.b, self.tokenize = k1, b, tokenize
        self.ids = list(ids) if ids is not None else [str(i) for i in range(len(docs))]
        if len(self.ids) != len(docs):
            raise ValueError("ids and docs differ in length")
        self.vocab: dict[str, int] = {}
        rows, cols, vals = [], [], []
        lengths = np.zeros(len(docs), dtype=np.float64)
        for i, text in enumerate(docs):
            counts: dict[int, int] = {}
            toks = self.tokenize(text)
            lengths[i] = len(toks)
            for tok in toks:
                j = self.vocab.setdefault(tok, len(self.vocab))
                counts[j] = counts.get(j, 0) + 1
            rows.extend([i] * len(counts))
            cols.extend(counts.keys())
            vals.extend(counts.values())
        tf = sp.csr_matrix((np.asarray(vals, dtype=np.float64), (rows, cols)), shape=(len(docs), len(self.vocab)))
        n = len(docs)
        df = np.bincount(tf.indices, minlength=len(self.vocab)).astype(np.float64)
        self.idf = np.log1p((n - df + 0.5) / (df + 0.5))
        avgdl = lengths.mean() if n else 0.0
        norm = k1 * (1.0 - b + b * lengths / max(avgdl, 1e-9))
        tf = tf.tocoo()
        weights = tf.data / (tf.data + norm[tf.row]) * self.idf[tf.col]
        self.matrix = sp.csr_matrix((weights, (tf.row, tf.col)), shape=tf.shape).T.tocsr()  # terms x docs

    def _query_matrix(self, queries: Sequence[str]) -> sp.csr_matrix:
        rows, cols = [], []
        for i, q in enumerate(queries):
            for tok in self.tokenize(q):
                j = self.vocab.get(tok)
                if j is not None:
                    rows.append(i)
                    cols.append(j)
        data = np.ones(len(rows))
        return sp.csr_matrix((data, (rows, cols)), shape=(len(queries), len(self.vocab)))

    def score(self, queries: Sequence[str]) -> np.ndarray:
        """Dense ``(len(queries), len(docs))`` score matrix (for small collections)."""
        return np.asarray((self._query_matrix(queries) @ self.matrix).todense())

    def search(self, queries: dict[str, str] | Iterable[tuple[str, str]], k: int = 1000,
               batch_size: int = 256) -> dict[str, dict[str, float]]:
        """Top-``k`` documents per query as ``{qid: {docid: score}}`` (zero-score documents left out)."""
        items = list(queries.items() if isinstance(queries, dict) else queries)
        out: dict[str, dict[str, float]] = {}
        for start in range(0, len(items), batch_size):
            chunk = items[start:start + batch_size]
            scores = self.score([q for _, q in chunk])
            kk = min(k, scores.shape[1])
            top = np.argpartition(-scores, kk - 1, axis=1)[:, :kk] if kk < scores.shape[1] else \
                np.tile(np.arange(scores.shape[1]), (len(chunk), 1))
            for row, (qid, _) in enumerate(chunk):
                cand = top[row]
                cand = cand[scores[row, cand] > 0]
                order = sorted(cand.tolist(), key=lambda j: (-scores[row, j], self.ids[j]))
                out[qid] = {self.ids[j]: float(scores[row, j]) for j in order}
        return out

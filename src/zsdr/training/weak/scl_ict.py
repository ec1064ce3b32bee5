"""SCL and ICT weak pairs of a corpus (:mod:`zsdr.training.weak`): how a document's pairs and a pair's
negative are made (:class:`PairRule`, :class:`CorpusNegatives`) and the writer of a set
(:func:`write_weak_pairs`), in passes over the documents in the seeded order. No torch here."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np

from zsdr.io import DataError, atomic_write
from zsdr.training.weak.documents import CorpusDocument, selected_documents
from zsdr.training.weak.draws import DocumentDraws, ict_draws, ict_pair, scl_draws
from zsdr.training.weak.format import pair_statistics, write_pair

log = logging.getLogger(__name__)

_NEGATIVE_STREAM = 4  # fourth seed word of a pair's negative (see zsdr.training.weak)
NEGATIVE_DRAWS = 1000  # documents tried for a negative before the corpus is declared unable to give one


class PairRule:
    """How ``scl`` or ``ict`` pairs are made from a document (:mod:`zsdr.training.weak`): :meth:`draws` gives a
    document's :class:`DocumentDraws`, :meth:`negative_of` a negative in the positive's format."""

    def __init__(self, method: str, *, tokenizer=None, seed: int = 0, max_tokens: int = 30,
                 new_span_probability: float = 0.1, keep_probability: float = 0.1):
        if method not in ("scl", "ict"):
            raise ValueError(f"weak-pair method {method!r}: expected 'scl' or 'ict' (qgen: write_qgen_pairs)")
        if method == "scl" and tokenizer is None:
            raise ValueError("scl pairs need the tokenizer that counts span tokens")
        if not 0.0 <= keep_probability <= 1.0:
            raise ValueError(f"keep_probability {keep_probability} must lie in [0, 1]")
        self.method, self.tokenizer, self.seed = method, tokenizer, int(seed)
        self.max_tokens, self.new_span_probability = int(max_tokens), float(new_span_probability)
        self.keep_probability = float(keep_probability)

    def _spans(self, title: str, text: str, index: int) -> list[str]:
        from zsdr.pretrain.spans import document_spans

        spans = document_spans(f"{title} {text}".strip(), self.tokenizer, self.max_tokens,
                               self.new_span_probability, self.seed, index)
        return list(dict.fromkeys(spans or ()))

    def draws(self, doc: CorpusDocument) -> DocumentDraws:
        from zsdr.pretrain.spans import split_sentences

        if self.method == "scl":
            return scl_draws(self._spans(doc.title, doc.text, doc.index), self.seed, doc.index)
        return ict_draws(split_sentences(doc.text), self.seed, doc.index, self.keep_probability)

    def positive(self, doc: CorpusDocument, part: str) -> dict:
        """The positive ``{"title", "text"}`` of a pair whose drawn second part is ``part``."""
        return {"title": "" if self.method == "scl" else doc.title, "text": part}

    def negative_of(self, title: str, text: str, index: int, rng: np.random.Generator) -> dict | None:
        """A negative drawn from document ``index`` as its own positives are (``None``: it gives no pair)."""
        from zsdr.pretrain.spans import split_sentences

        if self.method == "scl":
            spans = self._spans(title, text, index)
            if len(spans) < 2:
                return None
            return {"title": "", "text": spans[int(rng.integers(len(spans)))]}
        pair = ict_pair(split_sentences(text), rng, self.keep_probability)
        return None if pair is None else {"title": title, "text": pair[1]}


class CorpusNegatives:
    """Negatives for the pairs of one corpus, drawn by a :class:`PairRule` from another of its documents,
    read by row from the dataset's memory-mapped store (its rows are the documents of ``corpus.jsonl`` in
    file order)."""

    def __init__(self, dataset_dir: str | os.PathLike, rule: PairRule):
        from zsdr.data.store import open_current

        self.rule, self.dataset_dir = rule, Path(dataset_dir)
        self.store = open_current(dataset_dir)[0]
        self.n = len(self.store)

    def draw(self, index: int, k: int) -> dict:
        """The negative of pair ``k`` of the document at position ``index``."""
        rng = np.random.default_rng([self.rule.seed, int(index), int(k), _NEGATIVE_STREAM])
        for _ in range(NEGATIVE_DRAWS):
            j = int(rng.integers(self.n))
            if j == index:
                continue
            doc = self.store[j]
            negative = self.rule.negative_of(doc.get("title") or "", doc.get("text") or "", j, rng)
            if negative is not None:
                return {"doc_id": self.store.id(j), **negative}
        raise DataError(self.dataset_dir / "corpus.jsonl", None,
                        f"no other document of the corpus gives a {self.rule.method} negative in {NEGATIVE_DRAWS} draws",
                        "weak pairs need a corpus with several documents that give pairs")



def write_weak_pairs(dataset_dir: str | os.PathLike, out_path: str | os.PathLike, method: str, *, tokenizer=None,
                     max_pairs: int | None = None, pairs_per_document: int | None = 1, seed: int = 0,
                     max_tokens: int = 30, new_span_probability: float = 0.1, keep_probability: float = 0.1,
                     negatives: bool = True, statistics: str | os.PathLike | None = None) -> dict:
    """Write the ``scl`` or ``ict`` pairs of the BEIR corpus in ``dataset_dir`` to ``out_path``.

    Documents are visited in the seeded order of :func:`~zsdr.training.weak.documents.permuted_documents`, in passes (:mod:`zsdr.training.weak`,
    Size: pass ``k`` gives each document with a distinct pair left its pair ``k``) until
    ``max_pairs`` pairs are written (``None``: every document's pairs), no document has one left, or
    ``pairs_per_document`` passes are done (``None``: no limit, which needs ``max_pairs``). SCL needs
    ``tokenizer`` (a Hugging Face tokenizer: it counts span tokens, ``max_tokens`` and
    ``new_span_probability`` as in :func:`zsdr.pretrain.spans.document_spans`); ICT splits the
    document's ``text`` with :func:`zsdr.pretrain.spans.split_sentences`. ``negatives``: each pair
    carries a negative drawn by the positive's rule (:class:`CorpusNegatives`). The file is written
    atomically, pass by pass; ``statistics`` (a path) also gets :func:`pair_statistics` as JSON,
    which is returned.
    """
    import hashlib

    rule = PairRule(method, tokenizer=tokenizer, seed=seed, max_tokens=max_tokens,
                    new_span_probability=new_span_probability, keep_probability=keep_probability)
    if pairs_per_document is not None and int(pairs_per_document) < 1:
        raise ValueError(f"pairs_per_document {pairs_per_document} must be >= 1 (or null: as many passes as "
                         "max_pairs needs)")
    if max_pairs is not None and int(max_pairs) < 0:
        raise ValueError(f"max_pairs {max_pairs} must be >= 0 (or null for every document)")
    if pairs_per_document is None and max_pairs is None:
        raise ValueError("pairs_per_document null (as many pairs per document as max_pairs needs) needs max_pairs")
    passes = None if pairs_per_document is None else int(pairs_per_document)
    negative_source = CorpusNegatives(dataset_dir, rule) if negatives else None
    n = {"documents": 0, "pairs": 0, "skipped": 0, "passes": 0, "most": 0, "duplicates": 0}
    seen: set[bytes] = set()

    def full() -> bool:
        return max_pairs is not None and n["pairs"] >= int(max_pairs)

    def emit(fh, doc: CorpusDocument, k: int, pair: tuple[str, str]) -> None:
        query, part = pair
        positive = rule.positive(doc, part)
        key = hashlib.blake2b(json.dumps([query, positive["title"], positive["text"]]).encode(), digest_size=16)
        if key.digest() in seen:   # the same texts from another document (a corpus with duplicates): not again
            n["duplicates"] += 1
            return
        seen.add(key.digest())
        negative = negative_source.draw(doc.index, k) if negative_source is not None else None
        write_pair(fh, method, doc.id, k, query, positive, negative)
        n["pairs"] += 1
        n["most"] = max(n["most"], k + 1)
        n["passes"] = max(n["passes"], k + 1)

    active: list[tuple[CorpusDocument, DocumentDraws]] = []
    with atomic_write(out_path) as fh:
        if not full():
            for doc in selected_documents(dataset_dir, seed, max_pairs, 1):
                n["documents"] += 1
                draws = rule.draws(doc)
                pair = draws.next()
                if pair is None:
                    n["skipped"] += 1
                    continue
                emit(fh, doc, 0, pair)
                if full():
                    break  # before the next document is fetched: that may read another window of the corpus
                if (passes is None or passes > 1) and not draws.exhausted:
                    active.append((doc, draws))
        k = 1
        while active and not full() and (passes is None or k < passes):
            left = []
            for doc, draws in active:
                pair = draws.next()
                if pair is None:
                    continue
                emit(fh, doc, k, pair)
                if full():
                    break
                if not draws.exhausted:
                    left.append((doc, draws))
            active, k = left, k + 1
    stats = pair_statistics(method, max_pairs, n["documents"], n["skipped"], n["pairs"], len(seen), n["passes"],
                            n["most"], negative_source.n if negative_source is not None else None)
    stats["duplicates_left_out"] = n["duplicates"]
    if statistics is not None:
        with atomic_write(statistics) as fh:
            json.dump(stats, fh, indent=1)
    log.info("%s pairs of %s: %d (%d distinct) from %d documents (%d skipped) in %d passes, target %s",
             method, dataset_dir, stats["pairs"], stats["distinct"], stats["documents"], stats["skipped"],
             stats["passes"], max_pairs)
    return stats

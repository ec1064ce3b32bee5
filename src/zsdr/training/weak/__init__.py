"""Weak supervision for RMSC: (pseudo-query, pseudo-positive) pairs drawn from a corpus.

RMSC (Fang et al., AAAI 2024) trains a dense retriever on the labelled MS MARCO pairs plus weak
pairs extracted from the source and target corpora by three methods:

* ``scl`` (span-level contrastive learning): two spans of one document are query and positive.
  The spans are COCO-DR's (:func:`zsdr.pretrain.spans.document_spans`: sentences of
  ``title + " " + text`` packed into spans of at most ``max_tokens`` tokens); the positive is
  ``{"title": "", "text": span}``.
* ``ict`` (inverse cloze task, Lee et al. 2019): one sentence of the document's ``text`` is the
  query, the other sentences in order, joined by a space, are the positive (titled with the
  document's title); with probability ``keep_probability`` (10 % in Lee et al.) the sentence is
  left in the context, so the model also learns to match words.
* ``qgen``: a seq2seq query generator writes queries for the document, which is the positive
  (:func:`~zsdr.training.weak.qgen_pairs.write_qgen_pairs`; BEIR's QGen setup).

Selection. :func:`~zsdr.training.weak.documents.permuted_documents` visits the documents of ``corpus.jsonl``
in a permutation seeded by ``seed`` (not in file order), so ``max_pairs`` takes a random subset of documents,
and the pairs written for a smaller ``max_pairs`` are a prefix of those written for a larger one. The corpus
is read once to count it, then once per window of positions in the permutation: the first window holds the
documents ``max_pairs`` should need (twice the expected count), each further window twice as many; without
``max_pairs`` one window holds the whole corpus.

Randomness. Pair ``k`` of the document at position ``index`` of ``corpus.jsonl`` is drawn from
``numpy.random.default_rng([seed, index, k, 1])`` alone (:func:`~zsdr.training.weak.draws.pair_rng`), so a
document's pairs do not depend on which other documents are read. The fourth word keeps these streams apart
from the span packer's ``default_rng([seed, index])``: numpy pads a seed with zeros, so ``[seed, index, 0]``
would *be* that stream. The permutation comes from ``default_rng([seed, 0, 0, 2])``.

Size. RMSC controls each weak set's size to be "comparable to" the labelled set's: ``max_pairs`` is
that size, and the writer draws in passes over the documents (in the seeded order): pass 0 gives each
document its pair 0, pass ``k`` its pair ``k``, until ``max_pairs`` pairs are written, every document
has given all the distinct pairs it has, or ``pairs_per_document`` passes are done (``None``: no
limit). A large corpus stops within pass 0 (one pair per document, a random subset of documents); a
small one gives several pairs per document, as evenly as its documents allow. The pairs of a smaller
``max_pairs`` are a prefix of those of a larger one.

Distinct pairs. The pairs of a document are pairwise distinct: pair ``k`` is drawn from its own
stream and redrawn from that stream while it repeats an earlier pair of the document (ICT: the same
query sentence; SCL: the same two spans, in either role: one encoder reads both sides, so a swapped
pair is the same example). A document gives at most as many pairs as it has distinct options (ICT:
distinct sentences; SCL: unordered pairs of distinct spans), never a duplicate; a corpus whose
documents have fewer options than ``max_pairs`` needs gives fewer pairs, and the statistics say so.
The first pair is always ``ict_pair`` / ``scl_pair`` of its stream. A document that gives no pair
(fewer than two sentences or spans) is skipped and counted.

Negatives. Each SCL / ICT pair carries one negative drawn by the positive's own rule from another
document ``j`` of the corpus (uniform over the documents that give pairs, the pair's own excluded):
SCL a span of ``j``'s spans (the spans ``j``'s own pairs are drawn from), title ``""``; ICT ``j``'s
context (its text less one sentence, kept with ``keep_probability``) under ``j``'s title. The
positive and the negative thus differ in relevance only, not in length or title (a whole titled
document beside an untitled 30-token span would tell them apart). Drawn from
``default_rng([seed, index, k, 4])``.

Statistics (:func:`~zsdr.training.weak.format.pair_statistics`): the writer returns, and the workflow saves
beside the file, the target, the pairs written, how many are distinct (query, positive) texts and how many
repeat one (0 for SCL and ICT: a pair whose texts another document already gave, as a corpus holding duplicate
documents does, is left out and counted in ``duplicates_left_out``), the passes, the largest number of pairs
of one document and the shortfall below the target.

File format (JSON lines, one pair a line, ``.gz`` compresses)::

    {"_id": "<method>-<doc_id>-<k>", "doc_id": str, "query": str,
     "positive": {"title": str, "text": str}, "method": "scl" | "ict" | "qgen",
     "negative": {"doc_id": str, "title": str, "text": str}}

(``k`` counts the pairs of one document from 0; ``negative`` is optional: QGen pairs, whose positive
is a whole document, have none.)

The package's modules, one concern each:

* :mod:`~zsdr.training.weak.draws`: the pairs of one document (:func:`~zsdr.training.weak.draws.pair_rng`,
  ``ict_pair`` / ``scl_pair`` and the distinct draws of a document);
* :mod:`~zsdr.training.weak.documents`: which documents are visited, in the seeded order;
* :mod:`~zsdr.training.weak.scl_ict`: :func:`~zsdr.training.weak.scl_ict.write_weak_pairs` writes SCL and ICT
  files (each pair's negative drawn by :class:`~zsdr.training.weak.scl_ict.CorpusNegatives`);
* :mod:`~zsdr.training.weak.qgen_pairs`: :func:`~zsdr.training.weak.qgen_pairs.write_qgen_pairs` writes QGen
  files with a :class:`~zsdr.models.generator.QueryGenerator` (the only module that needs torch);
* :mod:`~zsdr.training.weak.format`: the file format, one line a pair, written and read back
  (:func:`~zsdr.training.weak.format.read_weak_pairs`), and a set's statistics;
* :mod:`~zsdr.training.weak.table`: a file converted for training, an Arrow table every process maps
  (:class:`~zsdr.training.weak.table.PairsTable`).

This file holds no code: a job's code inputs list the modules it runs, not the package.
"""

"""Retrieval metrics through ranx's metric kernels, with per-query scores kept for significance tests.

Metric names are ranx's (``ndcg@10``, ``recall@100``, ``recall@1000``, ``mrr@10``, ``precision@10``,
...) plus ``hole@K`` (computed here). Conventions, chosen to agree with ``trec_eval``/``pytrec_eval``
to 1e-6 (``tests/test_evaluation.py`` checks it on random runs with ties):

* **Relevance**: grade >= 1 is relevant; grade <= 0 is judged non-relevant. nDCG uses linear gains
  (the grade), like ``trec_eval``'s ``ndcg_cut``.
* **Queries**: every query of the qrels, including one whose judgements are all non-relevant
  (grade <= 0): it scores 0 on every relevance metric and counts in the mean, as ``trec_eval``
  (``num_q``), ``pytrec_eval`` and BEIR's ``EvaluateRetrieval`` count it. Hole@K is MoDIR's measure
  over the queries with at least one relevant document: for the others it is ``null`` per query and
  left out of its mean. Run queries absent from the qrels are ignored (``trec_eval`` ignores them too).
* **Missing queries**: ``missing="zero"`` (default, BEIR's convention and ``trec_eval -c``): a query
  of the qrels that the run does not answer scores 0 and counts in the mean. ``missing="skip"``
  averages only over the queries the run has (a key of the run dict, even with an empty ranking:
  ``trec_eval`` without ``-c``). ``tests/test_evaluation.py`` checks both against the ``trec_eval``
  binary that ships in Anserini's jar.
* **Ties**: each ranking is ordered as ``trec_eval`` orders it — score descending, then docid
  descending (plain string comparison) — before ranx sees it, and ranx is handed the ranking in
  that order. (ranx's own ``Run`` sorts with an unstable argsort: ties land anywhere.)
* **ignore_identical_ids** (BEIR, for ArguAna and Quora): retrieved documents whose id equals the
  query id are removed before ranking, so the documents below move up.
* **hole@K** (MoDIR's hole rate): per query, the share of the top-K retrieved documents that have no
  judgement at all for that query (neither relevant nor judged 0), over ``min(K, retrieved)``
  documents; 0 for a query with nothing retrieved. The aggregate is the mean over queries; MoDIR's
  evaluation code pools the counts over all queries instead (``sum unjudged / sum retrieved``), which
  is the same number whenever every query retrieves at least K documents.

Speed: ranx's ``Qrels``/``Run`` objects are bypassed (building them costs seconds of numba
dictionary code per process); rankings go to ``ranx.evaluate`` as numba typed lists of
``[[doc, score], ...]`` arrays, which reuses ranx's cached kernels. Runs are read, filtered, joined
with the judgements and sorted as Arrow tables (``zsdr.data.formats.read_trec_run_table``), not as
Python dicts. :func:`evaluate_many` evaluates many runs in one process and parses each qrels file once.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np

from zsdr.io import DataError, atomic_write, read_json

log = logging.getLogger(__name__)

# ranx metrics whose value depends only on the relevant documents and the ranking.
RANX_METRICS = ("ndcg", "dcg", "ndcg_burges", "dcg_burges", "recall", "precision", "mrr", "map", "hits",
                "hit_rate", "r-precision", "f1")
DEFAULT_METRICS = ("ndcg@10", "recall@100", "recall@1000", "mrr@10", "hole@10")
MISSING_CONVENTIONS = ("zero", "skip")
UNJUDGED, NONRELEVANT = -2, -1   # codes of a retrieved document that is not relevant


def _ensure_numba_cache() -> None:
    """Point numba's on-disk cache at ``./.cache/numba`` unless set (ranx's kernels are ``cache=True``).

    Must run before numba is imported to take effect; this module calls it at import time.
    """
    if "NUMBA_CACHE_DIR" not in os.environ and "numba" not in sys.modules:
        os.environ["NUMBA_CACHE_DIR"] = str(Path.cwd() / ".cache" / "numba")


_ensure_numba_cache()


# ---------------------------------------------------------------------------------------------
# Metric names


@dataclass(frozen=True)
class Metric:
    name: str        # as given: "ndcg@10"
    base: str        # "ndcg"
    k: int           # cut-off; 0 = whole ranking


MAX_CUTOFF = 1_000_000_000   # ranx's kernels take 64-bit integers: ndcg@99999999999999999999 failed in numba


def parse_metrics(metrics: str | Iterable[str]) -> list[Metric]:
    """``"ndcg@10,recall@100"`` or a list of names -> :class:`Metric` list; unknown names raise ValueError."""
    names = [m.strip() for m in (metrics.split(",") if isinstance(metrics, str) else metrics)]
    out = []
    for name in names:
        base, _, cut = name.partition("@")
        if base not in RANX_METRICS and base != "hole":
            raise ValueError(f"unknown metric {name!r}: use hole@K or one of {', '.join(RANX_METRICS)} "
                             "(with an optional @K cut-off)")
        if cut and not (cut.isascii() and cut.isdigit() and 0 < int(cut) <= MAX_CUTOFF):
            raise ValueError(f"metric {name!r}: the cut-off after '@' must be an integer from 1 to {MAX_CUTOFF:,} "
                             "(a cut-off beyond a ranking's length counts the whole ranking)")
        if base == "hole" and not cut:
            raise ValueError("hole needs a cut-off, e.g. hole@10")
        out.append(Metric(name, base, int(cut or 0)))
    if not out or len({m.name for m in out}) != len(out):
        raise ValueError(f"metrics must be a non-empty list of distinct names, got {names}")
    return out


# ---------------------------------------------------------------------------------------------
# Qrels


class PreparedQrels:
    """Qrels ready to score many runs: the evaluated queries and, per query, a code for each judged doc.

    ``qids``: sorted ids of every judged query, those without a relevant document included (they
    score 0, as in ``trec_eval``). ``relevant[i]``: whether query i has a document of grade >= 1.
    ``codes[i]``: doc id -> its index among query i's relevant documents (>= 0), or ``NONRELEVANT``
    when judged below 1. ``arrays[i]``: ranx's qrels array ``[[index, grade], ...]`` of the relevant
    documents, grades descending (ranx computes the ideal DCG from this order); empty when none.
    """

    def __init__(self, qrels: Mapping[str, Mapping[str, int]], source: str | None = None):
        self.source = source
        self.qids = sorted(q for q, docs in qrels.items() if docs)
        self.relevant = np.array([any(g >= 1 for g in qrels[q].values()) for q in self.qids], dtype=bool)
        self.codes: list[dict[str, int]] = []
        self.arrays: list[np.ndarray] = []
        for q in self.qids:
            docs = qrels[q]
            relevant = sorted((d for d, g in docs.items() if g >= 1), key=lambda d: (-docs[d], d))
            codes = {d: NONRELEVANT for d, g in docs.items() if g < 1}
            codes.update((d, i) for i, d in enumerate(relevant))
            self.codes.append(codes)
            self.arrays.append(np.array([[i, docs[d]] for i, d in enumerate(relevant)],
                                        dtype=np.float64).reshape(-1, 2))

    @cached_property
    def qid_array(self):
        """:attr:`qids` as a pyarrow string array (built once, used by every run scored against these qrels)."""
        import pyarrow as pa

        return pa.array(self.qids, pa.string())

    @cached_property
    def judged(self):
        """Every judgement of the evaluated queries as a pyarrow table ``q``, ``d``, ``code`` (built once)."""
        import pyarrow as pa

        q = [q for q, codes in zip(self.qids, self.codes) for _ in range(len(codes))]
        d = [d for codes in self.codes for d in codes]
        code = np.fromiter((c for codes in self.codes for c in codes.values()), dtype=np.int64, count=len(d))
        return pa.table({"q": pa.array(q, pa.string()), "d": pa.array(d, pa.string()), "code": code})

    def __len__(self) -> int:
        return len(self.qids)


def _first_line(path: Path) -> tuple[int, str] | None:
    from zsdr.io import open_lines

    with open_lines(path) as lines:
        for text in lines:
            if text.strip():
                return lines.lineno, text
    return None


def qrels_format(path: str | os.PathLike) -> str:
    """``"beir-dir"``, ``"beir-tsv"`` or ``"trec"``, from the path and the first non-blank line."""
    from zsdr.data.formats import QRELS_HEADER

    path = Path(path)
    if path.is_dir():
        return "beir-dir"
    first = _first_line(path)
    if first is None:
        raise DataError(path, None, "the qrels file is empty", "give a BEIR qrels tsv or a TREC qrels file")
    line, text = first
    tabbed = [c.strip() for c in text.split("\t")]
    if tuple(tabbed[:3]) == QRELS_HEADER or len(tabbed) == 3:
        return "beir-tsv"
    if len(text.split()) == 4:
        return "trec"
    raise DataError(path, line, f"neither a BEIR qrels tsv nor TREC qrels: {text[:80]!r}",
                    "BEIR: header 'query-id<TAB>corpus-id<TAB>score' then 3 tab-separated columns; "
                    "TREC: 4 blank-separated columns 'qid iter docid rel'")


def load_qrels(source: str | os.PathLike, split: str | None = "test") -> dict[str, dict[str, int]]:
    """Qrels from a BEIR dataset folder (+ ``split``), a BEIR qrels tsv or a TREC qrels file."""
    from zsdr.data.formats import read_qrels, read_trec_qrels

    kind = qrels_format(source)
    if kind == "beir-dir":
        return read_qrels(source, split or "test")
    if kind == "beir-tsv":
        return read_qrels(source)
    return read_trec_qrels(source)


# ---------------------------------------------------------------------------------------------
# Rankings


@dataclass
class _Rankings:
    present: np.ndarray      # indices (into qrels.qids) of the queries with >= 1 retrieved doc
    retrieved: np.ndarray    # documents retrieved per present query (after ignore_identical_ids)
    rows: np.ndarray         # per kept row: position of its query in `present`
    ranks: np.ndarray        # per kept row: 0-based rank in its query
    codes: np.ndarray        # per kept row: relevant index, NONRELEVANT or UNJUDGED
    scores: np.ndarray       # per kept row


def _as_table(run):
    """A run given as ``{qid: {docid: score}}`` or as a table (:func:`zsdr.data.formats.run_table`)."""
    from zsdr.data.formats import run_table

    return run_table(run) if isinstance(run, Mapping) else run


def _rankings(qrels: PreparedQrels, table, ignore_identical_ids: bool, depth: int) -> _Rankings:
    """The evaluated queries' rankings in ``trec_eval``'s order, cut at ``depth`` (0: uncut).

    ``table``: the run as a pyarrow table (``q``, ``d``, ``s``), one row per (query, document). The
    filtering, the join with the judgements and the sort (query, score descending, docid descending:
    ``trec_eval``'s tie-break, plain byte order of the ids) all run in Arrow's C++ kernels.
    """
    import pyarrow.compute as pc

    keep = pc.is_in(table["q"], value_set=qrels.qid_array)
    if ignore_identical_ids:
        keep = pc.and_(keep, pc.not_equal(table["q"], table["d"]))
    table = table.filter(keep)
    nan = pc.is_nan(table["s"])
    if pc.any(nan).as_py():
        bad = table["q"].filter(nan)[0].as_py()
        raise ValueError(f"query {bad!r}: the run has a NaN score")
    table = table.join(qrels.judged, keys=["q", "d"], join_type="left outer")
    table = table.take(pc.sort_indices(table, sort_keys=[("q", "ascending"), ("s", "descending"),
                                                         ("d", "descending")]))
    encoded = pc.dictionary_encode(table["q"]).combine_chunks()
    rows = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    present = pc.index_in(encoded.dictionary, value_set=qrels.qid_array).to_numpy(zero_copy_only=False).astype(np.int64)
    retrieved = np.bincount(rows, minlength=len(present)).astype(np.int64)
    starts = np.concatenate(([0], np.cumsum(retrieved)[:-1])).astype(np.int64)
    ranks = np.arange(len(rows), dtype=np.int64) - starts[rows]
    codes = pc.fill_null(table["code"], UNJUDGED).to_numpy().astype(np.int64)
    scores = table["s"].to_numpy()
    if depth:
        top = ranks < depth
        rows, ranks, codes, scores = rows[top], ranks[top], codes[top], scores[top]
    return _Rankings(present, retrieved, rows, ranks, codes, scores)


# ---------------------------------------------------------------------------------------------
# Evaluation


def _ranx_scores(qrels: PreparedQrels, rk: _Rankings, metrics: list[Metric]) -> dict[str, np.ndarray]:
    """Per present query, each ranx metric, computed by ``ranx.evaluate`` on typed lists."""
    import warnings

    import numba
    from numba.core.errors import NumbaTypeSafetyWarning
    from numba.typed import List as TypedList
    from ranx import evaluate

    warnings.simplefilter("ignore", NumbaTypeSafetyWarning)  # ranx's own uint64 -> int64 casts
    ids = np.where(rk.codes >= 0, rk.codes, -1).astype(np.float64)
    table = np.ascontiguousarray(np.column_stack((ids, rk.scores)))
    bounds = np.searchsorted(rk.rows, np.arange(1, len(rk.present)))
    run_list = TypedList(np.split(table, bounds))
    qrels_list = TypedList([qrels.arrays[i] for i in rk.present])
    threads = numba.get_num_threads()
    try:
        names = [m.name for m in metrics]
        # ranx 0.3 raises KeyError for a single cut-off metric with return_mean=False (it looks the
        # result up under the name without "@k"): always ask for at least two metrics.
        asked = names if len(names) > 1 else names + ["hits" if names[0] != "hits" else "precision"]
        scores = evaluate(qrels_list, run_list, asked, return_mean=False, save_results_in_run=False)
    finally:
        numba.set_num_threads(threads)  # ranx.evaluate drops to 1 thread for < 10 queries, globally
    return {m: np.asarray(scores[m], dtype=np.float64) for m in names}


def _with_relevant(qrels: PreparedQrels, rk: _Rankings) -> _Rankings:
    """The rankings of the present queries that have a relevant document, alone: ranx's kernels are only asked about queries whose ideal DCG is not zero; every
    relevance metric of the others is 0 (what ``trec_eval`` gives them)."""
    keep = qrels.relevant[rk.present]
    if keep.all():
        return rk
    new_index = np.cumsum(keep) - 1
    rows = keep[rk.rows]
    return _Rankings(rk.present[keep], rk.retrieved[keep], new_index[rk.rows[rows]], rk.ranks[rows],
                           rk.codes[rows], rk.scores[rows])


def _hole_scores(rk: _Rankings, k: int) -> np.ndarray:
    top = rk.ranks < k
    unjudged = np.bincount(rk.rows[top & (rk.codes == UNJUDGED)], minlength=len(rk.present))
    return unjudged / np.minimum(rk.retrieved, k)


def evaluate_prepared(qrels: PreparedQrels, run, metrics: str | Iterable[str], ignore_identical_ids: bool = False,
                      missing: str = "zero") -> dict:
    """:func:`evaluate_run` on qrels prepared once (see :class:`PreparedQrels`).

    ``run``: ``{qid: {docid: score}}`` or a run table (:func:`zsdr.data.formats.read_trec_run_table`).
    """
    if missing not in MISSING_CONVENTIONS:
        raise ValueError(f"missing must be one of {MISSING_CONVENTIONS}, got {missing!r}")
    parsed = parse_metrics(metrics)
    depth = 0 if any(m.k == 0 for m in parsed) else max(m.k for m in parsed)
    table = _as_table(run)
    run_keys = run.keys() if isinstance(run, Mapping) else ()   # a dict may list a query with no documents
    rk = _rankings(qrels, table, ignore_identical_ids, depth)
    values = {m.name: np.zeros(len(qrels)) for m in parsed}
    if len(rk.present):
        ranx_metrics = [m for m in parsed if m.base != "hole"]
        relevant = _with_relevant(qrels, rk)
        if ranx_metrics and len(relevant.present):
            for name, v in _ranx_scores(qrels, relevant, ranx_metrics).items():
                values[name][relevant.present] = v
        for m in parsed:
            if m.base == "hole":
                values[m.name][rk.present] = _hole_scores(rk, m.k)
    answered = set(table["q"].unique().to_pylist())
    if missing == "zero":
        evaluated = list(range(len(qrels)))
    else:
        evaluated = [i for i, q in enumerate(qrels.qids) if q in answered or q in run_keys]
    holes = {m.name for m in parsed if m.base == "hole"}  # MoDIR: over queries with a relevant document only
    per_query = {qrels.qids[i]: {m: (None if m in holes and not qrels.relevant[i] else float(values[m][i]))
                                 for m in values} for i in evaluated}
    aggregate = {}
    for m in values:
        counted = [i for i in evaluated if qrels.relevant[i]] if m in holes else evaluated
        aggregate[m] = float(np.mean(values[m][counted])) if counted else 0.0
    unanswered = sum(1 for q in qrels.qids if q not in answered)
    without_relevant = int(sum(1 for i in evaluated if not qrels.relevant[i]))
    return {"aggregate": aggregate, "per_query": per_query, "queries": len(evaluated),
            "without_relevant": without_relevant, "unanswered": unanswered, "missing": missing, "ignore_identical_ids": bool(ignore_identical_ids)}


def evaluate_run(qrels: Mapping[str, Mapping[str, int]], run: Mapping[str, Mapping[str, float]],
                 metrics: str | Iterable[str], ignore_identical_ids: bool = False, missing: str = "zero") -> dict:
    """``{"aggregate": {metric: mean}, "per_query": {qid: {metric: value}}, "queries": n, ...}``.

    ``qrels``: ``{qid: {docid: grade}}``; ``run``: ``{qid: {docid: score}}``. Extra keys:
    ``without_relevant`` (evaluated queries judged only non-relevant: they score 0),
    ``unanswered`` (evaluated queries the run has no ranking for), ``missing``,
    ``ignore_identical_ids``. See the module docstring for the conventions.
    """
    return evaluate_prepared(PreparedQrels(qrels), run, metrics, ignore_identical_ids, missing)


def write_metrics(path: str | os.PathLike, result: dict, **meta) -> None:
    """The metrics JSON: ``meta`` first, then ``aggregate``, ``per_query``, ``queries``, ... (atomic)."""
    with atomic_write(path) as fh:
        json.dump({**meta, **result}, fh, indent=1, sort_keys=False)
        fh.write("\n")


def _qrels_key(source: str | os.PathLike, split: str | None) -> tuple:
    path = Path(source).resolve()
    stat = path.stat() if path.exists() else None
    return (str(path), split, stat and stat.st_mtime_ns, stat and stat.st_size)


def evaluate_many(jobs: Sequence[Mapping], cache: dict | None = None) -> list[dict]:
    """Evaluate several runs in this process; each qrels source is parsed once.

    Each job: ``qrels`` (BEIR folder, BEIR tsv or TREC qrels), ``split`` (for a folder; default
    ``test``), ``run`` (TREC run file, or a ``{qid: {docid: score}}`` dict), ``metrics``, optional
    ``out`` (metrics JSON written there), ``ignore_identical_ids`` (default False), ``missing``
    (default ``"zero"``) and ``meta`` (extra keys for the JSON). Returns the results in job order.
    ``cache`` (a dict) keeps prepared qrels across calls. A run that answers none of the evaluated
    queries raises :class:`DataError`; one that misses some is scored with a warning (how many).
    """
    from zsdr.data.formats import read_trec_run_table

    cache = {} if cache is None else cache
    results = []
    for job in jobs:
        unknown = set(job) - {"qrels", "split", "run", "metrics", "out", "ignore_identical_ids", "missing", "meta"}
        if unknown:
            raise ValueError(f"evaluate_many: unknown job keys {sorted(unknown)}")
        start = time.perf_counter()
        split = job.get("split", "test")
        key = _qrels_key(job["qrels"], split)
        if key not in cache:
            qrels = load_qrels(job["qrels"], split)
            _check_judges_something(qrels, job["qrels"], split)
            cache[key] = PreparedQrels(qrels, source=str(job["qrels"]))
        run = job["run"]
        run_data = run if isinstance(run, Mapping) else read_trec_run_table(run)
        check_run_corpus(job["qrels"], run, run_data)
        read = time.perf_counter()
        result = evaluate_prepared(cache[key], run_data, job["metrics"], job.get("ignore_identical_ids", False),
                                   job.get("missing", "zero"))
        _check_coverage(cache[key], result, job, split)
        if job.get("out"):
            meta = {"qrels": str(job["qrels"]), "split": split,
                    "run": "<in memory>" if isinstance(run, Mapping) else str(run), **job.get("meta", {})}
            write_metrics(job["out"], result, **meta)
        log.info("%s: %d queries, %s (read %.2f s, scored %.2f s)", job.get("out") or "in-memory run",
                 result["queries"], ", ".join(f"{m}={v:.4f}" for m, v in result["aggregate"].items()),
                 read - start, time.perf_counter() - read)
        results.append(result)
    return results


def evaluate_runs(qrels: str | os.PathLike, split: str, runs: str | Sequence[str], outputs: Sequence[str], *,
                  metrics: Sequence[str], ignore_identical_ids: bool, dataset: str) -> list[dict]:
    """The metrics of every run of ``runs`` (a TREC run file, or several) on one dataset's ``split`` in this
    process (:func:`evaluate_many`: the qrels parsed once), each written to its file of ``outputs`` (in order)
    with the dataset's name and the system's (the output file's stem); returns the results in order."""
    runs = [runs] if isinstance(runs, (str, os.PathLike)) else list(runs)
    outputs = list(outputs)
    if len(runs) != len(outputs):
        raise ValueError(f"evaluate_runs: {len(runs)} run(s) but {len(outputs)} metrics file(s): one file per run")
    return evaluate_many([
        {"qrels": qrels, "split": split, "run": run, "out": out, "metrics": list(metrics),
         "ignore_identical_ids": bool(ignore_identical_ids), "meta": {"dataset": dataset, "system": Path(out).stem}}
        for run, out in zip(runs, outputs)
    ])


def qrels_dataset(qrels: str | os.PathLike) -> Path | None:
    """The dataset folder whose corpus ``qrels`` judges: the folder given, or the folder of a
    ``<dataset>/qrels/<split>.tsv`` file; None for a qrels file outside a dataset."""
    path = Path(qrels)
    folder = path if path.is_dir() else path.parent.parent if path.parent.name == "qrels" else None
    if folder is None or not any(folder.glob("corpus.jsonl*")):
        return None
    return folder


def check_run_corpus(qrels: str | os.PathLike, run, run_data) -> None:
    """A run made for another corpus than the qrels' dataset is refused (:mod:`zsdr.provenance`): what its
    sidecar records (another corpus digest), and whatever it records, its document ids counted against the
    corpus (more than :data:`~zsdr.provenance.UNKNOWN_IDS_MAX` unknown: refused, not scored as misses)."""
    import pyarrow.compute as pc

    from zsdr.provenance import check_known_ids, corpus_identity, describe_corpus, read_run_provenance, same_corpus

    dataset = qrels_dataset(qrels)
    if dataset is None:
        return
    where = "the in-memory run" if isinstance(run, Mapping) else run
    if not isinstance(run, Mapping):
        recorded = (read_run_provenance(run) or {}).get("corpus")
        if recorded and same_corpus(recorded, corpus_identity(dataset)) is False:
            raise DataError(run, None, f"the run was made over {describe_corpus(recorded)}, the qrels of {qrels} "
                            f"judge {describe_corpus(corpus_identity(dataset))}",
                            "evaluate the run against the qrels of the dataset it was made for")
    if isinstance(run_data, Mapping):
        ids = [d for docs in run_data.values() for d in docs]
    else:
        ids = pc.unique(run_data["d"]).to_pylist()
    check_known_ids(ids, dataset, where, "run", "evaluate the run against the qrels of the dataset it was made for "
                    "(its third column is the document id)")


def _check_judges_something(qrels: Mapping, source: str | os.PathLike, split: str | None) -> None:
    """Qrels with no judgement, or none relevant, would score every run 0: refused, naming the file."""
    from zsdr.data.formats import QRELS_FIX, judges_nothing, qrels_files

    problem = judges_nothing(qrels)
    if problem:
        path = Path(source)
        if path.is_dir():
            path = qrels_files(path).get(split or "test", path)
        raise DataError(path, None, problem, QRELS_FIX)


def _check_coverage(qrels: PreparedQrels, result: dict, job: Mapping, split: str | None) -> None:
    """A run that answers none of the evaluated queries is an error (wrong dataset, split or file); one
    that misses some is scored (they count 0 under ``missing="zero"``) with a warning saying how many."""
    total, unanswered = len(qrels), result["unanswered"]
    if not total or not unanswered:
        return
    run = job["run"]
    where = "the in-memory run" if isinstance(run, Mapping) else str(run)
    against = f"{job['qrels']}" + (f" (split {split})" if Path(job["qrels"]).is_dir() else "")
    if unanswered == total:
        raise DataError(None if isinstance(run, Mapping) else run, None,
                        f"the run answers none of the {total} evaluated queries of {against}",
                        "check that the run was made for this dataset and split (its first column is the query id)")
    effect = "each scores 0 in the mean" if result["missing"] == "zero" else "they are left out of the mean"
    log.warning("%s: the run has no ranking for %d of the %d evaluated queries of %s; %s", where, unanswered, total,
                against, effect)


def evaluate_files(dataset: str | os.PathLike, split: str, run_file: str | os.PathLike, out: str | os.PathLike,
                   metrics: Iterable[str], ignore_identical_ids: bool = False) -> dict:
    """Evaluate a TREC run file against ``dataset``'s qrels of ``split``; write the metrics JSON."""
    return evaluate_many([{"qrels": dataset, "split": split, "run": run_file, "out": out, "metrics": list(metrics),
                           "ignore_identical_ids": ignore_identical_ids, "meta": {"dataset": str(dataset)}}])[0]


# ---------------------------------------------------------------------------------------------
# Averaging datasets (CQADupStack)


def _cqadupstack() -> tuple[str, ...]:
    from zsdr.data.registry import CQA_FORUMS

    return tuple(f"cqadupstack-{f}" for f in CQA_FORUMS)


def read_metrics(path: str | os.PathLike) -> dict:
    """A metrics file, checked for ``aggregate`` and ``per_query`` mappings."""
    data = read_json(path, "re-run the evaluate rule that writes it")
    for key in ("aggregate", "per_query"):
        if not isinstance(data.get(key), dict):
            raise DataError(path, None, f"no {key!r} mapping", "re-run the evaluate rule that writes it")
    return data


def average_metrics(parts: Mapping[str, Mapping | str | os.PathLike]) -> dict:
    """Mean of several datasets' metrics (CQADupStack: its 12 forums), as one metrics result.

    ``parts``: name -> metrics result or metrics JSON path. ``aggregate``: the unweighted mean of
    the parts' aggregates (BEIR's CQADupStack number); ``per_query``: every part's queries keyed
    ``name/qid`` (for significance tests on the union; note their plain mean weights forums by
    size and so differs from ``aggregate``); ``queries``: their total; ``parts``: each part's
    aggregate and query count. Every part must have the same metrics.
    """
    if not parts:
        raise ValueError("average_metrics needs at least one part")
    loaded = {name: (read_metrics(p) if isinstance(p, (str, os.PathLike)) else p) for name, p in parts.items()}
    metric_sets = {name: tuple(sorted(r["aggregate"])) for name, r in loaded.items()}
    first = next(iter(metric_sets.values()))
    for name, ms in metric_sets.items():
        if ms != first:
            where = parts[name] if isinstance(parts[name], (str, os.PathLike)) else None
            raise DataError(where, None, f"part {name!r} has metrics {list(ms)}, others {list(first)}",
                            "evaluate every part with the same metrics")
    aggregate = {m: float(np.mean([r["aggregate"][m] for r in loaded.values()])) for m in first}
    per_query = {f"{name}/{q}": dict(v) for name, r in loaded.items() for q, v in r["per_query"].items()}
    return {"aggregate": aggregate, "per_query": per_query, "queries": len(per_query),
            "parts": {name: {"aggregate": dict(r["aggregate"]), "queries": r.get("queries", len(r["per_query"]))}
                      for name, r in loaded.items()}}


def average_cqadupstack(metrics_dir: str | os.PathLike, out: str | os.PathLike | None = None,
                        system: str | None = None) -> dict:
    """:func:`average_metrics` over ``<metrics_dir>/cqadupstack-<forum>[/<system>].json`` of the 12 forums."""
    root = Path(metrics_dir)
    parts = {name: root / name / f"{system}.json" if system else root / f"{name}.json" for name in _cqadupstack()}
    result = average_metrics(parts)
    if out is not None:
        write_metrics(out, result, dataset="cqadupstack", **({"system": system} if system else {}))
    return result

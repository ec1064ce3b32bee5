"""RMSC's joint training over several supervision sets (docs/methods/rmsc.md#soft-tokens, #joint-training, #re-trained-baselines).

RMSC (Fang et al., AAAI 2024) fine-tunes one bi-encoder on a shuffled mixture of

* the source's human-labelled pairs (MS MARCO train queries, one judged positive each),
* weak pairs extracted from the source corpus (:mod:`zsdr.training.weak`: SCL, ICT or QGen),
* weak pairs extracted from the target corpus,

marks every input with soft tokens (``[S]``/``[T]`` before the text, ``[H]``/``[W]`` after it;
:mod:`zsdr.models.soft_tokens`), gives each query one random negative, and restricts the in-batch
negatives to documents of the same (domain, relevance) group (eq. 12-16):

    L_i = -log( e^{s(q_i, d_i+)} / (e^{s(q_i, d_i+)} + Σ_{j in group(i)} e^{s(q_i, d_j)}) )

where the sum runs over every document of the global batch (positives and random negatives) whose
item belongs to the same group as item ``i`` (its own random negative included). The printed
eq. 12 omits the ``-log``; this is its negative log-likelihood form, averaged over the queries.

The same task trains the baselines RMSC re-trains: one set (the source's labelled pairs, no soft
tokens) is "Condenser / COCO fine-tuned on MS MARCO with random negatives" (docs/methods/rmsc.md#re-trained-baselines); one set of
target QGen pairs continued from such a model is the QGen curve of Figure 2.

A spec (``kind: mixture``, :func:`build_mixture_task`) lists its ``sets``; each set is a dict:

* ``name``: a label for the logs; ``domain``: ``source`` | ``target``; ``relevance``:
  ``human`` | ``weak`` (the soft-token context and the negative group);
* ``dataset``: the BEIR folder (its corpus gives the random negatives; a ``human`` set also reads
  its queries and the qrels of ``split``, default ``train``); corpus and queries are read through the
  dataset's memory-mapped store (:func:`zsdr.data.store.open_current`), shared by every process;
* ``pairs`` (weak sets): a weak-pairs file of :func:`zsdr.training.weak.scl_ict.write_weak_pairs`;
* ``size``: ``null`` (every example), a number, or ``supervised`` (as many as the first ``human``
  set has, "comparable to the supervised set" [P]); a seeded subset is drawn when fewer are asked;
* ``negatives``: where a weak pair's random negative comes from [X]: ``pair`` (the negative stored
  with the pair, :mod:`zsdr.training.weak`: "a different document d_j from the corpus" made into the
  positive's format by the positive's own rule, a span of another document for SCL, its context for
  ICT, so that length and title do not tell positive from negative; a pair without one, QGen's, whose
  positive is a whole document, gets a random document as ``corpus`` does), ``corpus`` (a random
  whole document of the set's corpus other than the pair's own) or ``pseudo`` (the pseudo-positive of
  another pair of the same set). A ``pair`` negative is drawn once per pair; ``corpus`` and ``pseudo``
  draw again every epoch.

Sampling is a pure function of ``(seed, epoch, example index)``, as everywhere in the trainer.
"""

from __future__ import annotations

import logging
import os
from collections import abc
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from zsdr.data.store import ById, TextStore, open_current
from zsdr.io import DataError

log = logging.getLogger(__name__)

DOMAINS = ("source", "target")
RELEVANCES = ("human", "weak")
WEAK_NEGATIVES = ("pair", "corpus", "pseudo")
_SET_KEYS = {"name", "domain", "relevance", "dataset", "split", "pairs", "size", "negatives"}


@dataclass(frozen=True)
class Item:
    """One training example: a query, its positive and the keys of what may not be its negative."""

    group: int
    query: str
    positive: dict
    positive_key: str
    relevant: frozenset[str]
    negative: dict | None = None       # the pair's own negative (weak pairs: zsdr.training.weak)
    negative_key: str | None = None


class StoredItem:
    """A human-labelled example whose query and positive are read from the dataset's store on use (the
    rows of both, not their texts, are kept)."""

    __slots__ = ("group", "query_row", "positive_row", "positive_key", "relevant", "_corpus", "_queries")
    negative = None

    def __init__(self, group: int, query_row: int, positive_row: int, positive_key: str, relevant: frozenset[str],
                 corpus: TextStore, queries: TextStore):
        self.group, self.query_row, self.positive_row = group, query_row, positive_row
        self.positive_key, self.relevant = positive_key, relevant
        self._corpus, self._queries = corpus, queries

    @property
    def query(self) -> str:
        return self._queries[self.query_row]

    @property
    def positive(self) -> dict:
        return self._corpus[self.positive_row]


@dataclass
class SupervisionSet:
    """The examples of one set and where its random negatives come from: ``corpus`` (the dataset's
    store, by id) and ``corpus_rows``, its rows in id order (a random negative is the document at a
    random position of the ids sorted)."""

    name: str
    domain: str
    relevance: str
    items: list[StoredItem] | WeakItems
    corpus_rows: np.ndarray
    corpus: ById
    negatives: str


def _check_set(entry: dict, where: str) -> dict:
    unknown = sorted(set(entry) - _SET_KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown keys {unknown} (known: {', '.join(sorted(_SET_KEYS))})")
    for key, allowed in (("domain", DOMAINS), ("relevance", RELEVANCES)):
        if entry.get(key) not in allowed:
            raise ValueError(f"{where}.{key}: {entry.get(key)!r}, expected one of {', '.join(allowed)}")
    if not entry.get("dataset"):
        raise ValueError(f"{where}.dataset: name the BEIR folder of the set")
    if entry["relevance"] == "weak" and not entry.get("pairs"):
        raise ValueError(f"{where}.pairs: a weak set needs its weak-pairs file")
    if entry.get("negatives", "corpus") not in WEAK_NEGATIVES:
        raise ValueError(f"{where}.negatives: {entry['negatives']!r}, expected one of {', '.join(WEAK_NEGATIVES)}")
    size = entry.get("size")
    if size is not None and size != "supervised" and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
        raise ValueError(f"{where}.size: {size!r}, expected null, a positive number or 'supervised'")
    return entry


def _subset(items, size: int | None, seed: int, salt: int):
    """A seeded subset of ``size`` items in their original order (all when ``size`` is None or larger)."""
    if size is None or size >= len(items):
        return items
    keep = np.sort(np.random.default_rng([seed, 77, salt]).choice(len(items), size=size, replace=False))
    if isinstance(items, WeakItems):
        return items.subset(keep)
    return [items[int(i)] for i in keep]


class WeakItems(abc.Sequence):
    """The examples of a weak set, read on use from its mapped pairs table
    (:class:`zsdr.training.weak.table.PairsTable`), shared by every process of the job: ``items[i]`` is an
    :class:`Item` (``rows``: the table rows of a subset, in order; all rows without)."""

    def __init__(self, table, group: int, rows: np.ndarray | None = None):
        self.table, self.group, self.rows = table, group, rows

    def __len__(self) -> int:
        return len(self.table) if self.rows is None else len(self.rows)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        p = self.table[int(i) if self.rows is None else int(self.rows[i])]
        # a QGen positive is the document itself: its key is the document's id
        key = p.doc_id if p.method == "qgen" else p.id
        negative = None if p.negative is None else {"title": p.negative["title"], "text": p.negative["text"]}
        return Item(self.group, p.query, p.positive, key, frozenset({p.id, p.doc_id}), negative,
                    None if negative is None else f"{p.id}#negative")

    def subset(self, keep: np.ndarray) -> "WeakItems":
        base = np.arange(len(self.table)) if self.rows is None else self.rows
        return WeakItems(self.table, self.group, np.asarray(base[keep], dtype=np.int64))


def _human_items(dataset: Path, corpus: TextStore, queries: TextStore, split: str, group: int) -> list[StoredItem]:
    from zsdr.data.formats import qrels_files, read_qrels

    if split not in qrels_files(dataset):
        raise DataError(dataset / "qrels" / f"{split}.tsv", None, "file not found",
                        f"a human-labelled set needs the {split} qrels of its dataset")
    items = []
    for qid, row in read_qrels(dataset, split).items():
        rows = {d: corpus.find(d) for d, g in row.items() if g > 0}
        positives = sorted(d for d, r in rows.items() if r is not None)
        query_row = queries.find(qid)
        if query_row is None or not positives:
            continue
        # one labelled positive per query [P]: the first in id order (MS MARCO has ~1.06 per query)
        items.append(StoredItem(group, query_row, rows[positives[0]], positives[0], frozenset(positives),
                                corpus, queries))
    if not items:
        raise DataError(dataset / "qrels" / f"{split}.tsv", None, "no query with a judged positive in the corpus",
                        "check the qrels ids against corpus.jsonl and queries.jsonl")
    return items


def pairs_table_path(pairs: str | os.PathLike, folder: str | os.PathLike) -> Path:
    """Where the mapped table of weak-pair file ``pairs`` lives in ``folder``: named by the file's path,
    size and modification time, so a new file gets a new table."""
    import hashlib

    pairs = Path(pairs)
    st = pairs.stat()
    key = hashlib.sha1(f"{pairs.resolve()}\0{st.st_size}\0{st.st_mtime_ns}".encode()).hexdigest()[:16]
    return Path(folder) / f"{pairs.name}.{key}.arrow"


def pairs_table(pairs: str | os.PathLike, folder: str | os.PathLike) -> Path:
    """The mapped table of weak-pair file ``pairs`` in ``folder`` (:func:`pairs_table_path`), converted first
    when it is not there yet."""
    from zsdr.training.weak.table import write_pairs_table

    path = pairs_table_path(pairs, folder)
    if not path.is_file():
        write_pairs_table(pairs, path)
    return path


def prepare_pairs_tables(spec: dict) -> None:
    """Convert the weak-pair files of a mixture spec into their mapped tables in its checkpoint folder (the
    launcher does it once, before the processes start, so that they map one copy)."""
    for entry in spec.get("sets") or []:
        if entry.get("pairs"):
            pairs_table(entry["pairs"], Path(spec["checkpoint_dir"]) / PAIRS_TABLES)


PAIRS_TABLES = "weak-pairs"   # the folder of a mixture's mapped weak-pair tables, in its checkpoint folder


def _weak_items(pairs: Path, group: int, tables: Path | None) -> WeakItems:
    import shutil
    import tempfile

    from zsdr.training.weak.table import PairsTable, write_pairs_table

    if tables is not None:
        table = PairsTable(pairs_table(pairs, tables))
    else:   # no checkpoint folder: a table for this process (its pages stay mapped once the file is gone)
        tmp = Path(tempfile.mkdtemp(prefix="zsdr-pairs-"))
        try:
            table = PairsTable(write_pairs_table(pairs, tmp / "pairs.arrow"))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    if not len(table):
        raise DataError(pairs, None, "no weak pairs", "extract the weak pairs again")
    return WeakItems(table, group)


def load_sets(entries: list[dict], seed: int, where: str = "sets",
              tables: str | os.PathLike | None = None) -> list[SupervisionSet]:
    """The supervision sets of a spec (groups numbered by first appearance of each (domain, relevance));
    each dataset's store is opened once, however many sets draw from it."""
    if not entries:
        raise ValueError(f"{where}: name at least one supervision set")
    groups: dict[tuple[str, str], int] = {}
    out: list[SupervisionSet] = []
    supervised: int | None = None
    corpora: dict[Path, tuple[ById, TextStore, np.ndarray]] = {}
    for n, entry in enumerate(entries):
        entry = _check_set(entry, f"{where}[{n}]")
        key = (entry["domain"], entry["relevance"])
        group = groups.setdefault(key, len(groups))
        dataset = Path(entry["dataset"])
        if dataset not in corpora:
            docs, queries = open_current(dataset)
            corpora[dataset] = (ById(docs), queries, docs.rows_in_id_order())
        corpus, queries, corpus_rows = corpora[dataset]
        if entry["relevance"] == "human":
            items = _human_items(dataset, corpus.store, queries, entry.get("split", "train"), group)
        else:
            items = _weak_items(Path(entry["pairs"]), group, None if tables is None else Path(tables))
            first = items.table[0]
            if entry.get("negatives", "corpus") == "pair" and first.method != "qgen" and first.negative is None:
                raise DataError(Path(entry["pairs"]), 1, f"{where}[{n}].negatives is 'pair' but the {first.method} "
                                "pairs carry no negative", "extract the weak pairs again (zsdr.training.weak.scl_ict."
                                "write_weak_pairs draws one per pair), or set the mixture's weak_negatives to corpus")
        size = entry.get("size")
        if size == "supervised":
            if supervised is None:
                raise ValueError(f"{where}[{n}].size: 'supervised' needs a human-labelled set listed before it")
            size = supervised
        items = _subset(items, size, seed, n)
        if entry["relevance"] == "human" and supervised is None:
            supervised = len(items)
        out.append(SupervisionSet(entry.get("name") or f"{key[0]}-{key[1]}", entry["domain"], entry["relevance"],
                                  items, corpus_rows, corpus, entry.get("negatives", "corpus")))
        log.info("set %s (%s, %s): %d examples", out[-1].name, *key, len(items))
    return out


class MixtureTask(nn.Module):
    """One bi-encoder trained on a shuffled mixture of supervision sets (see the module doc).

    ``group_negatives``: in-batch negatives only from the same (domain, relevance) group (RMSC);
    False: every document of the batch is a negative (the plain in-batch loss). ``soft_tokens``:
    whether inputs carry their set's (domain, relevance) context (the encoder must have them).
    """

    def __init__(self, encoder, sets: list[SupervisionSet], *, scale: float = 1.0, seed: int = 42,
                 group_negatives: bool = True, soft_tokens: bool = True):
        super().__init__()
        if soft_tokens and not getattr(encoder.config, "soft_tokens", None):
            raise ValueError("soft_tokens: the encoder has no soft tokens (add them with Encoder.add_soft_tokens)")
        self.encoder = encoder
        self.sets = sets
        self.scale = float(scale)
        self.seed = int(seed)
        self.group_negatives = bool(group_negatives)
        self.soft_tokens = bool(soft_tokens)
        self.offsets = np.cumsum([0] + [len(s.items) for s in sets])
        self.group_names = {}
        for s in sets:
            self.group_names.setdefault(s.items[0].group, f"{s.domain}-{s.relevance}")

    @property
    def num_examples(self) -> int:
        return int(self.offsets[-1])

    def locate(self, index: int) -> tuple[SupervisionSet, int]:
        k = int(np.searchsorted(self.offsets, index, side="right")) - 1
        return self.sets[k], index - int(self.offsets[k])

    def negative(self, index: int, epoch: int) -> tuple[dict, str]:
        """The random negative example ``index`` draws in ``epoch`` (document, key): a pure function."""
        s, i = self.locate(index)
        item = s.items[i]
        if s.negatives == "pair" and s.relevance == "weak" and item.negative is not None:
            return item.negative, item.negative_key
        rng = np.random.default_rng([self.seed, epoch, index, 11])
        for _ in range(100):
            if s.negatives == "pseudo" and s.relevance == "weak":
                other = s.items[int(rng.integers(len(s.items)))]
                if other.positive_key not in item.relevant and other.positive_key != item.positive_key:
                    return other.positive, other.positive_key
            else:
                row = int(s.corpus_rows[int(rng.integers(len(s.corpus_rows)))])
                did = s.corpus.store.id(row)
                if did not in item.relevant and did != item.positive_key:
                    return s.corpus.store[row], did
        raise ValueError(f"set {s.name}: no random negative found for example {i} in 100 draws "
                         f"(is the corpus or the set a single document?)")

    def make_batch(self, indices: list[int], epoch: int) -> dict:
        enc = self.encoder
        queries, docs, contexts, doc_keys, relevant, groups = [], [], [], [], [], []
        for index in indices:
            s, i = self.locate(index)
            item = s.items[i]
            neg, neg_key = self.negative(index, epoch)
            queries.append(item.query)
            docs += [item.positive, neg]
            doc_keys += [item.positive_key, neg_key]
            contexts.append((s.domain, s.relevance))
            relevant.append(set(item.relevant))
            groups.append(item.group)
        q_ctx = contexts if self.soft_tokens else None
        d_ctx = [c for c in contexts for _ in range(2)] if self.soft_tokens else None
        return {"q": enc.collate(enc.tokenize_queries(queries, contexts=q_ctx)),
                "d": enc.collate(enc.tokenize_docs(docs, contexts=d_ctx)), "doc_keys": doc_keys,
                "relevant": relevant, "groups": groups}

    def forward(self, batch: dict) -> tuple[torch.Tensor, dict]:
        import torch.nn.functional as F

        from zsdr.losses.contrastive import MASKED, relevance_mask
        from zsdr.distributed import gather_objects, gather_with_grad, rank_offset

        q = self.encoder(**batch["q"])
        d = self.encoder(**batch["d"])
        n = q.shape[0]
        all_d = gather_with_grad(d)
        all_keys = gather_objects(batch["doc_keys"])
        doc_groups = torch.tensor([g for g in gather_objects(batch["groups"]) for _ in range(2)], device=q.device)
        groups = torch.tensor(batch["groups"], device=q.device)
        targets = rank_offset(d.shape[0]) + torch.arange(n, device=q.device) * 2
        mask = group_mask(groups, doc_groups) if self.group_negatives else torch.zeros(
            (n, len(all_keys)), dtype=torch.bool, device=q.device)
        mask = mask | relevance_mask(batch["relevant"], all_keys).to(q.device)
        mask[torch.arange(n, device=q.device), targets] = False
        logits = (self.scale * (q.float() @ all_d.float().T)).masked_fill(mask, MASKED)
        per_query = F.cross_entropy(logits, targets, reduction="none")
        loss = per_query.mean()
        logs = {"accuracy": (logits.detach().argmax(dim=1) == targets).float().mean()}
        for g, name in self.group_names.items():
            rows = groups == g
            if bool(rows.any()):
                logs[f"loss_{name}"] = per_query.detach()[rows].mean()
        return loss, logs

    def save(self, directory: str | os.PathLike) -> Path:
        return self.encoder.save_pretrained(directory)


def group_mask(query_groups: torch.Tensor, doc_groups: torch.Tensor) -> torch.Tensor:
    """``(n, m)`` bool: True where document ``j`` belongs to another group than query ``i`` (masked)."""
    return query_groups[:, None] != doc_groups[None, :]


def build_mixture_task(spec: dict) -> MixtureTask:
    """The task of a ``mixture`` spec: ``init``, ``encoder`` overrides, ``sets``, ``scale``,
    ``group_negatives`` (default true), ``soft_tokens`` (``null``, or ``{k, seed}``: tokens added
    when the init model has none), ``dropout``, ``train.seed``."""
    from zsdr.models.encoder import Encoder, set_dropout

    seed = int(spec["train"]["seed"])
    encoder = Encoder.from_pretrained(spec["init"], retrieval=False, **spec.get("encoder", {}))
    soft = spec.get("soft_tokens")
    if soft and not encoder.config.soft_tokens:
        encoder.add_soft_tokens(k=int(soft.get("k", 1)), seed=int(soft.get("seed", seed)))
    set_dropout(encoder.backbone, spec.get("dropout"))
    encoder.train()
    tables = Path(spec["checkpoint_dir"]) / PAIRS_TABLES if spec.get("checkpoint_dir") else None
    sets = load_sets(spec["sets"], seed, tables=tables)
    return MixtureTask(encoder, sets, scale=spec["scale"], seed=seed,
                       group_negatives=spec["group_negatives"], soft_tokens=bool(soft))

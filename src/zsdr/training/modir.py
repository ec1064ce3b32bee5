"""MoDIR as a loss term of the bi-encoder task (docs/methods/modir.md): a domain classifier trained on a
momentum queue of detached embeddings, and an adversarial loss that pushes the encoder towards
embeddings the classifier cannot tell apart.

Every encoder micro-step, :class:`ModirTerm`

1. encodes a batch of target "triples" (a target query and two target documents, no labels;
   :func:`build_target_triples`) beside the source batch of the base recipe;
2. measures the *Local Domain-Acc*: the current classifier's accuracy on this step's embeddings
   (queries and documents apart), before it learns from them;
3. pushes the step's detached embeddings (source queries, one source document, target queries,
   one target document; gathered from every process) into the queue, which holds the last ``n``
   steps (``momentum``; ``single`` is n = 1; ``repeat`` trains on the current step repeated n
   times and keeps no queue). The source document is the positive on even micro-steps and the
   first negative on odd ones; the target document alternates between the triple's two;
4. trains the classifier on ``n`` queue entries in chunks of ``chunk`` entries (:meth:`ModirTerm.rehearsal`:
   the official code's ``which_step = min(rep, len(queue) - 1)`` for ``rep`` = 1 .. n, so a queue
   that is still filling repeats its newest entry and every encoder step gets its ``n / chunk``
   classifier steps (20 at n 1000, chunk 50) from the first step on; a full queue gives entries
   1 .. n-1, the newest twice); one backward pass per chunk (the chunk's cross-entropy times its entry count, as the official code does), one
   optimiser step per chunk on the last micro-step of an accumulation window. The other
   micro-steps' gradients pile up into the first of those steps, as in the official code;
5. adds ``λ_t`` times the adversarial loss of the step's four embedding sets under a frozen copy
   of the updated classifier (:mod:`zsdr.losses.adversarial`).

The classifier has its own optimiser (the encoder's kind: LAMB in the papers) with its own
learning rate, no weight decay, gradient clipping, and the encoder's warmup / decay schedule
stepped once per encoder step [X: the code builds the same schedule; whether it steps per
classifier or per encoder step is not recoverable]. Its weights, optimiser, schedule and queue
are checkpointed with the encoder, so a resumed run continues exactly. The classifier is not a
submodule of the task: the encoder's optimiser and DDP never see it, and its gradient never comes
from the encoder's loss (that uses a detached copy of the weights); queue entries are detached,
so the classifier's loss never reaches the encoder.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from zsdr.data.formats import read_qrels
from zsdr.data.store import TextStore, open_current
from zsdr.distributed import gather_with_grad
from zsdr.io import DataError, atomic_write
from zsdr.losses.adversarial import ADVERSARIAL_LOSSES, adversarial_loss, classifier_loss, lambda_at
from zsdr.models.heads import SOURCE, TARGET, DomainClassifier
from zsdr.training.sections import section_from_dict
from zsdr.training.terms import AdditiveTerm, Encoded, Sampled

MODES = ("momentum", "single", "repeat")
SETS = {"source_queries": SOURCE, "source_docs": SOURCE, "target_queries": TARGET, "target_docs": TARGET}


@dataclass(kw_only=True)
class ModirConfig:
    """The ``modir`` section of a recipe. The keys the config schema gives a default (``recipes.<name>.modir``
    in schemas/config.schema.yaml: ANCE+MoDIR, docs/methods/modir.md#hyperparameters) have none here: the
    workflow fills them into every spec."""

    triples: str | None = None          # target triples file (the workflow fills it in)
    target: str | None = None           # target BEIR folder with their texts (idem)
    loss: str                           # confusion | minimax | gan (Table 2)
    mode: str                           # momentum | single (n = 1) | repeat (current step n times)
    momentum_steps: int                 # n: steps the queue holds (code: dc_rep_steps)
    chunk: int                          # queue entries per classifier step (code: dc_rep_step_per_batch)
    lambda0: float                      # initial weight of the adversarial loss
    lambda_half_life: float | None      # steps per halving of λ (code: lamb_reduce_to_half_steps); null: constant
    classifier_lr: float
    classifier_max_grad_norm: float | None
    logit_clip: float | None
    seed: int = 0                       # classifier initialisation and target-triple order
    target_query_max_length: int | None = None  # the target's queries at another length than the source's
                                        # (code: --max_query_length_tgd, 512 for ArguAna); null: the encoder's

    def __post_init__(self):
        if self.loss not in ADVERSARIAL_LOSSES:
            raise ValueError(f"modir.loss {self.loss!r}: expected one of {', '.join(ADVERSARIAL_LOSSES)}")
        if self.mode not in MODES:
            raise ValueError(f"modir.mode {self.mode!r}: expected one of {', '.join(MODES)}")
        if int(self.momentum_steps) < 1 or int(self.chunk) < 1:
            raise ValueError("modir.momentum_steps and modir.chunk must be >= 1")

    @classmethod
    def from_dict(cls, data: dict) -> "ModirConfig":
        return section_from_dict(cls, data, "modir")

    @property
    def queue_size(self) -> int:
        return 1 if self.mode == "single" else int(self.momentum_steps)


# ---------------------------------------------------------------------------------- target data
def build_target_triples(dataset: str | os.PathLike, split: str, out: str | os.PathLike) -> dict:
    """MoDIR's target "triples" (``generate_triples_simple.py``, docs/methods/modir.md#target-domain-data): line ``i`` pairs
    query ``i`` with documents ``2i`` and ``2i+1``, cycling through the split's queries (in
    ``queries.jsonl`` order) and the non-empty documents (in corpus order) until both are used up.
    Only the query ids of ``qrels/<split>`` are read, never their relevance labels; the texts come
    from the dataset's store (:func:`zsdr.data.store.open_current`).
    Writes ``qid<TAB>doc<TAB>doc`` lines; returns counts."""
    corpus, queries = open_current(dataset)
    wanted = set(read_qrels(dataset, split))
    qids = [q for q in queries.ids() if q in wanted]
    docs = [d for d, rec in corpus.iter_range(0, len(corpus)) if f"{rec['title']} {rec['text']}".strip()]
    if not qids or len(docs) < 2:
        raise DataError(Path(dataset), None, f"{len(qids)} {split} queries and {len(docs)} non-empty documents",
                        "MoDIR's target triples need at least one query and two documents")
    n = max(len(qids), math.ceil(len(docs) / 2))
    with atomic_write(out) as fh:
        for i in range(n):
            fh.write(f"{qids[i % len(qids)]}\t{docs[(2 * i) % len(docs)]}\t{docs[(2 * i + 1) % len(docs)]}\n")
    return {"triples": n, "queries": len(qids), "docs": len(docs)}


def iter_target_triples(path: str | os.PathLike):
    """``(line, (query id, document id, document id))`` of a target-triples file, in file order."""
    path = Path(path)
    seen = False
    with open(path, encoding="utf-8") as fh:
        for line, text in enumerate(fh, 1):
            parts = text.rstrip("\n").split("\t")
            if len(parts) != 3 or not all(parts):
                raise DataError(path, line, "expected query id, document id, document id (tab-separated)",
                                "write the file with the modir_triples rule")
            seen = True
            yield line, (parts[0], parts[1], parts[2])
    if not seen:
        raise DataError(path, None, "no target triples", "write the file with the modir_triples rule")


def read_target_triples(path: str | os.PathLike) -> list[tuple[str, str, str]]:
    return [t for _, t in iter_target_triples(path)]


class TargetTriples:
    """A target-triples file as rows of the target's store: three int32 arrays (12 bytes a triple, where
    the ids as Python tuples take ~230), and the stores that give the texts. ``triples[i]`` is triple
    ``i``'s ``(query text, document, document)``. Ids the store lacks raise :class:`DataError` naming
    the file and line."""

    _READ = 1 << 16  # lines resolved at a time

    def __init__(self, path: str | os.PathLike, corpus: TextStore, queries: TextStore):
        self.path, self.corpus, self.queries = Path(path), corpus, queries
        parts: list[np.ndarray] = []
        block: list[tuple[int, tuple[str, str, str]]] = []

        def resolve():
            lines = [n for n, _ in block]
            rows = np.stack([queries.find_rows([t[0] for _, t in block]),
                             corpus.find_rows([t[1] for _, t in block]),
                             corpus.find_rows([t[2] for _, t in block])], axis=1)
            bad = np.flatnonzero((rows < 0).any(axis=1))
            if bad.size:
                k = int(bad[0])
                col = int(np.flatnonzero(rows[k] < 0)[0])
                what = "query" if col == 0 else "document"
                where = queries.directory if col == 0 else corpus.directory
                raise DataError(self.path, lines[k], f"{what} {block[k][1][col]!r} is not in the target's store "
                                f"({where})", "write the triples again with the modir_triples rule for this target")
            parts.append(rows.astype(np.int32))
            block.clear()

        for item in iter_target_triples(self.path):
            block.append(item)
            if len(block) == self._READ:
                resolve()
        if block:
            resolve()
        self.rows = np.concatenate(parts)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> tuple[str, dict, dict]:
        q, d0, d1 = self.rows[int(i)].tolist()
        return self.queries[q], self.corpus[d0], self.corpus[d1]


# -------------------------------------------------------------------------------------- queue
class MomentumQueue:
    """The detached embeddings of the last ``size`` steps, oldest first."""

    def __init__(self, size: int):
        self.entries: deque[dict[str, torch.Tensor]] = deque(maxlen=int(size))

    def __len__(self) -> int:
        return len(self.entries)

    def push(self, entry: dict[str, torch.Tensor]) -> None:
        self.entries.append({k: v.detach().clone() for k, v in entry.items()})

    def state_dict(self) -> dict:
        return {"size": self.entries.maxlen, "entries": [{k: v.cpu() for k, v in e.items()} for e in self.entries]}

    def load_state_dict(self, state: dict, device: torch.device | None = None) -> None:
        self.entries = deque(({k: v.to(device) if device else v for k, v in e.items()} for e in state["entries"]),
                             maxlen=int(state["size"]))


# --------------------------------------------------------------------------------------- term
class ModirTerm(AdditiveTerm):
    """The MoDIR part of a bi-encoder training step (see the module docstring): the recipe's ``modir``
    section, a checkpointed :class:`~zsdr.training.terms.AdditiveTerm`."""

    name = "modir"
    config_class = ModirConfig
    summary = "MoDIR's adversarial loss"
    checkpointed = True

    @classmethod
    def from_spec(cls, section: dict, encoder) -> "ModirTerm":
        return cls(cls.config_from(section), encoder.dim)

    @classmethod
    def input_files(cls, section: dict) -> list[str]:
        return [section["triples"]] if section.get("triples") else []

    def __init__(self, config: ModirConfig, dim: int):
        self.config = config
        self.classifier = DomainClassifier(dim, clip=config.logit_clip, seed=config.seed)
        self.queue = MomentumQueue(config.queue_size)
        self.triples: TargetTriples | list = []
        if config.triples:
            if not config.target:
                raise ValueError("modir.target: name the target's BEIR folder (its store gives the triples' texts)")
            corpus, queries = open_current(config.target)
            self.triples = TargetTriples(config.triples, corpus, queries)
        self._order = np.random.default_rng([config.seed, 7_001]).permutation(len(self.triples))
        self.optimizer = self.scheduler = None
        self.step, self.micro, self.last = 0, 0, True

    # ---- trainer hooks
    def attach(self, train_config, total_steps: int, device: torch.device) -> None:
        """Build the classifier's optimiser and schedule from the encoder's settings."""
        from zsdr.training.config import build_optimizer, build_schedule

        self.classifier.to(device)
        cfg = dataclasses.replace(train_config, lr=self.config.classifier_lr, weight_decay=0.0)
        self.optimizer = build_optimizer(self.classifier.parameters(), cfg)
        self.scheduler = build_schedule(self.optimizer, cfg, total_steps)

    def on_step(self, step: int, micro: int, last: bool) -> None:
        if step != self.step and self.scheduler is not None:
            for _ in range(step - self.step):
                self.scheduler.step()
        self.step, self.micro, self.last = step, micro, last

    def state_dict(self) -> dict:
        return {"classifier": self.classifier.state_dict(), "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(), "queue": self.queue.state_dict(),
                "step": self.step}

    def load_state_dict(self, state: dict) -> None:
        device = self.classifier.linear.weight.device
        self.classifier.load_state_dict(state["classifier"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.queue.load_state_dict(state["queue"], device)
        self.step = int(state["step"])

    # ---- data
    def batch(self, encoder, indices: Sequence[int], epoch: int, n_source: int) -> dict:
        """The target part of a batch: one triple per source example, a pure function of
        ``(epoch, index)`` (so resumed runs see the same ones)."""
        picks = [self.triples[self._order[(epoch * n_source + i) % len(self.triples)]] for i in indices]
        queries = encoder.tokenize_queries([q for q, _, _ in picks], max_length=self.config.target_query_max_length)
        return {"q": encoder.collate(queries),
                "d0": encoder.collate(encoder.tokenize_docs([d for _, d, _ in picks])),
                "d1": encoder.collate(encoder.tokenize_docs([d for _, _, d in picks]))}

    def batch_of(self, sampled: Sampled) -> dict:
        """:meth:`batch` of the micro-batch's examples."""
        return self.batch(sampled.encoder, sampled.indices, sampled.epoch, len(sampled.data))

    # ---- the step
    def rehearsal(self, current: dict[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
        """The entries the classifier trains on this step, in order: ``current`` n times (``repeat``),
        else ``queue[min(rep, len(queue) - 1)]`` for ``rep`` = 1 .. queue size, as the official
        code indexes its queue (``dc_rep_step`` 0 only logs): always ``queue size`` entries."""
        cfg = self.config
        if cfg.mode == "repeat":
            return [current] * cfg.momentum_steps
        entries = list(self.queue.entries)
        return [entries[min(rep, len(entries) - 1)] for rep in range(1, cfg.queue_size + 1)]

    def train_classifier(self, current: dict[str, torch.Tensor]) -> float:
        """Train on :meth:`rehearsal`'s entries; returns the mean chunk loss."""
        cfg = self.config
        entries = self.rehearsal(current)
        losses = []
        for start in range(0, len(entries), cfg.chunk):
            chunk = entries[start:start + cfg.chunk]
            emb = torch.cat([e[k] for e in chunk for k in SETS])
            labels = torch.cat([torch.full((e[k].shape[0],), SETS[k], dtype=torch.long, device=emb.device)
                                for e in chunk for k in SETS])
            loss = classifier_loss(self.classifier(emb), labels)
            (loss * len(chunk)).backward()
            losses.append(float(loss.detach()))
            if self.last:
                if cfg.classifier_max_grad_norm:
                    torch.nn.utils.clip_grad_norm_(self.classifier.parameters(), cfg.classifier_max_grad_norm)
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
        return sum(losses) / max(len(losses), 1)

    @torch.no_grad()
    def accuracy(self, entry: dict[str, torch.Tensor], keys: Sequence[str]) -> float:
        emb = torch.cat([entry[k] for k in keys])
        labels = torch.cat([torch.full((entry[k].shape[0],), SETS[k], device=emb.device) for k in keys])
        return float((self.classifier(emb).argmax(dim=1) == labels).float().mean())

    def loss(self, encoder, queries: torch.Tensor, docs: torch.Tensor, batch: dict) -> tuple[torch.Tensor, dict]:
        """``λ_t · L_adv`` of this step and its logs; ``docs``: ``(n, 1 + negatives, dim)``."""
        odd = self.micro % 2 == 1
        embs = {"source_queries": queries, "source_docs": docs[:, 1 if odd and docs.shape[1] > 1 else 0],
                "target_queries": encoder(**batch["q"]), "target_docs": encoder(**batch["d1" if odd else "d0"])}
        current = {k: gather_with_grad(v.detach().float()) for k, v in embs.items()}
        logs = {"local_domain_acc_queries": self.accuracy(current, ("source_queries", "target_queries")),
                "local_domain_acc_docs": self.accuracy(current, ("source_docs", "target_docs"))}
        if self.config.mode != "repeat":
            self.queue.push(current)
        with torch.enable_grad():
            logs["classifier_loss"] = self.train_classifier(current)
        frozen = self.classifier.linear.weight.detach().clone()
        logits = {k: DomainClassifier.logits_with(frozen, v, self.config.logit_clip) for k, v in embs.items()}
        adv = adversarial_loss(self.config.loss, logits, SETS, source=SOURCE, target=TARGET)
        lam = lambda_at(self.step, self.config.lambda0, self.config.lambda_half_life)
        logs.update(adversarial_loss=float(adv.detach()), adversarial_lambda=lam)
        return lam * adv, logs

    def loss_of(self, encoded: Encoded, data: dict) -> tuple[torch.Tensor, dict]:
        """:meth:`loss` of the step's queries and documents."""
        return self.loss(encoded.encoder, encoded.queries, encoded.docs, data)

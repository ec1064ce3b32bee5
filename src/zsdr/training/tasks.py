"""What a training step computes: bi-encoder, cross-encoder and reader tasks for
:class:`~zsdr.training.trainer.Trainer`.

A task is an ``nn.Module``: ``make_batch(indices, epoch)`` samples and tokenises the examples,
``forward(batch)`` returns ``(loss, logs)``, ``save(directory)`` writes the model.

:class:`BiEncoderTask` trains with one base loss (``loss``), a class of
:mod:`zsdr.training.base_losses` found by name in :mod:`zsdr.training.loss_registry`:
* ``pairwise_nll``: each query against its own positive and ``negatives`` sampled negatives
  (ANCE-family ``rdot_nll``; DPR warmup, ANCE episodes);
* ``contrastive``: each query against every positive and negative of the global batch (gathered
  with gradients across processes), inverse temperature ``scale``, other documents labelled
  relevant to the query masked (DDR's REM/DR contrastive loss);
* ``margin_mse``: Margin-MSE against teacher scores of the positive and each negative (KD).
The task holds no loss-specific code: the loss checks the training set, adds its entries to the
batch and computes itself from the encoded batch.

Loss terms (:mod:`zsdr.training.terms`) compose with any of them, in the order given: an
additive term (BERM's :class:`~zsdr.training.berm_term.BermTerm`, MoDIR's
:class:`~zsdr.training.modir.ModirTerm`) adds its loss, and each logs ``task_loss``, the loss before
its addition; at most one reducing term (COCO-DR's iDRO or GroupDRO,
:class:`~zsdr.training.idro.DroTerm`, ``pairwise_nll`` only) replaces the mean over the queries
(``task_loss`` logs the plain mean). Each term adds its part to the batch (``make_batch``), and
takes part in the trainer's hooks (``attach``: its own optimiser, the device, the checkpointed
state; ``on_step``: the step count); a term's trained modules are submodules of the task. The
task holds no term-specific code; a term is reachable as the attribute named after its section
(``task.dro``).

``scale`` multiplies the student's similarities into logits for every loss (1 for dot products;
cosine similarities need a temperature, e.g. DDR's 20).
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

import torch
from torch import nn

from zsdr.data.training_set import TrainingSet
from zsdr.models.encoder import Encoder
from zsdr.training.base_losses import BaseLoss, Scores
from zsdr.training.data import ReaderExample
from zsdr.training.loss_registry import LOSSES, loss_class
from zsdr.training.terms import AdditiveTerm, Encoded, ReducingTerm, Sampled, Term

log = logging.getLogger(__name__)


class Task(nn.Module):
    """What the trainer needs of a task besides ``forward``: the examples, sampled ``negatives``
    per query with ``seed``; subclasses add ``make_batch`` and ``save``."""

    def __init__(self, data: TrainingSet, negatives: int, seed: int):
        super().__init__()
        self.data = data
        self.negatives = int(negatives)
        self.seed = int(seed)

    @property
    def num_examples(self) -> int:
        return len(self.data)


BATCH_KEYS = ("q", "d", "qids", "doc_ids")  # the task's own batch entries (its loss may add its batch_keys)


class BiEncoderTask(Task):
    """A bi-encoder trained with one base loss (a name of :data:`~zsdr.training.loss_registry.LOSSES`)
    and any loss terms (see the module docstring)."""

    def __init__(self, encoder: Encoder, data: TrainingSet, loss: str, negatives: int = 1, scale: float = 1.0,
                 seed: int = 42, terms: list[Term] | tuple[Term, ...] = ()):
        super().__init__(data, negatives, seed)
        self.loss: BaseLoss = loss_class(loss)(scale)
        self.loss.check(data, self.negatives)
        log.info("loss %s x%g: %s", loss, self.loss.scale, LOSSES[loss].summary)
        terms = list(terms)
        check_terms(terms, self.loss)
        self.encoder = encoder
        # the terms are no submodules (MoDIR's classifier trains apart, iDRO's weights are no parameters);
        # what a term trains with the encoder is, under the term's name
        self.terms = terms
        self.reducer = next((t for t in terms if isinstance(t, ReducingTerm)), None)
        self.additive = [t for t in terms if isinstance(t, AdditiveTerm)]
        if self.reducer is not None:
            self.reducer.bind_task(self.loss, self.additive)
        trained = {t.name: t.trained_modules() for t in terms}
        self.term_modules = nn.ModuleDict({name: nn.ModuleList(mods) for name, mods in trained.items() if mods})
        self._token_states = any(t.needs_token_states for t in terms)

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:
            for term in self.__dict__.get("terms", ()):
                if term.name == name:
                    return term
            raise

    def attach(self, train_config, total_steps: int, device) -> list:
        """Trainer hook: attach every term; the checkpointed ones are returned (saved with the model)."""
        for term in self.terms:
            term.attach(train_config, total_steps, device)
        return [term for term in self.terms if term.checkpointed]

    def on_step(self, step: int, micro: int, last: bool) -> None:
        """Trainer hook, before each micro-batch: the optimizer step it belongs to."""
        for term in self.terms:
            term.on_step(step, micro, last)

    def make_batch(self, indices: list[int], epoch: int) -> dict:
        enc, data = self.encoder, self.data
        qrows, doc_rows, scores = [], [], []
        for i in indices:
            rows, teacher = data.draw(i, epoch, self.seed, self.negatives)
            qrows.append(data.qrow(i))
            doc_rows.extend(rows)
            scores.append(teacher)
        qids, doc_ids = data.queries_store.ids(qrows), data.corpus_store.ids(doc_rows)
        batch = {"q": enc.collate(enc.tokenize_queries(data.queries_store.rows(qrows))),
                 "d": enc.collate(enc.tokenize_docs(data.corpus_store.rows(doc_rows))),
                 "qids": qids, "doc_ids": doc_ids}
        group = 1 + self.negatives
        batch.update(self.loss.batch_of(data, indices, scores))
        if self.terms:
            sampled = Sampled(enc, data, list(indices), epoch, qids, doc_ids, group, batch["d"])
            for term in self.terms:
                part = term.batch_of(sampled)
                if part is not None:
                    batch[term.key] = part
        return batch

    def forward(self, batch: dict) -> tuple[torch.Tensor, dict]:
        # state a term moves per step (iDRO's weights) moves only in training steps (never under no_grad / eval)
        update = self.training and torch.is_grad_enabled()
        reducer, group = self.reducer, 1 + self.negatives
        if reducer is not None:
            reducer.begin(batch.get(reducer.key), update)
        with reducer.encoding(1) if reducer is not None else contextlib.nullcontext():
            q = self.encoder(**batch["q"])
        n = q.shape[0]
        states = None
        with reducer.encoding(group) if reducer is not None else contextlib.nullcontext():
            if self._token_states:
                d, hidden = self.encoder(**batch["d"], return_hidden=True)
                states = hidden.unflatten(0, (n, group))
            else:
                d = self.encoder(**batch["d"])
        own = torch.einsum("nd,nkd->nk", q.float(), d.float().view(n, group, -1))
        logs = {"accuracy": (own.detach().argmax(dim=1) == 0).float().mean()}
        encoded = Encoded(self.encoder, q, d.view(n, group, -1), states, update=update)
        scores = Scores(q, d, own)
        if self.reducer is None:
            loss = self.loss.loss(scores, batch)
        else:
            per_query = self.loss.loss(scores, batch, reduction="none")
            loss, term_logs = self.reducer.reduce(per_query, encoded, batch.get(self.reducer.key))
            logs.update(term_logs, task_loss=per_query.detach().mean())
        for term in self.additive:
            extra, term_logs = term.loss_of(encoded, batch.get(term.key))
            logs.update(term_logs, task_loss=loss.detach())
            loss = loss + extra
        return loss, logs

    def save(self, directory: str | os.PathLike) -> Path:
        return self.encoder.save_pretrained(directory)


def check_terms(terms: list[Term], loss: BaseLoss) -> None:
    """Terms a bi-encoder task with ``loss`` can hold: distinct sections and batch keys (none of the
    task's or the loss's), at most one reducing term, and that one only with a loss that has
    per-query values."""
    other = [t for t in terms if not isinstance(t, (AdditiveTerm, ReducingTerm))]
    if other:
        raise TypeError(f"loss term {other[0]!r}: neither an AdditiveTerm nor a ReducingTerm "
                        "(zsdr.training.terms)")
    names = [t.name for t in terms]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"loss term(s) {', '.join(twice)} given twice")
    keys = [t.key for t in terms]
    own = (*BATCH_KEYS, *loss.batch_keys)
    clash = sorted({k for k in keys if keys.count(k) > 1 or k in own})
    if clash:
        raise ValueError(f"loss terms: batch key(s) {', '.join(clash)} taken twice (the task's own: "
                         f"{', '.join(own)})")
    reducing = [t for t in terms if isinstance(t, ReducingTerm)]
    if len(reducing) > 1:
        raise ValueError(f"loss terms {' and '.join(t.name for t in reducing)} both replace the mean over the "
                         "per-query losses; a task takes at most one reducing term (keep one of these sections)")
    if reducing and not loss.per_query:
        t = reducing[0]
        what = f"{t.name} ({t.summary})" if t.summary else t.name
        per_query = [name for name, info in LOSSES.items() if info.per_query]
        raise ValueError(f"{what} weights per-query losses and supports loss "
                         f"{', '.join(per_query)} only, not {loss.name}")


class CrossEncoderTask(Task):
    """A :class:`~zsdr.models.cross_encoder.CrossEncoder` trained with a softmax over each query's
    positive and sampled negatives (localised contrastive estimation)."""

    def __init__(self, model, data: TrainingSet, negatives: int = 7, seed: int = 42):
        super().__init__(data, negatives, seed)
        self.model = model

    def make_batch(self, indices: list[int], epoch: int) -> dict:
        firsts, seconds = [], []
        for i in indices:
            ex, pos, negs = self.data.sample(i, epoch, self.seed, self.negatives)
            for did in (pos, *negs):
                firsts.append(self.data.queries[ex.qid])
                seconds.append(passage_text(self.data.corpus[did]))
        return self.model.features(firsts, seconds)

    def forward(self, batch: dict) -> tuple[torch.Tensor, dict]:
        from zsdr.losses.contrastive import pairwise_nll

        logits = self.model(**batch).view(-1, 1 + self.negatives)
        loss = pairwise_nll(logits[:, 0], logits[:, 1:])
        return loss, {"accuracy": float((logits.argmax(dim=1) == 0).float().mean())}

    def save(self, directory: str | os.PathLike) -> Path:
        return self.model.save_pretrained(directory)


def passage_text(doc: dict) -> str:
    """The passage side of a cross-encoder pair: title and text joined by a space."""
    return f"{doc.get('title') or ''} {doc['text']}".strip()


class ReaderTask(nn.Module):
    """A :class:`~zsdr.models.reader.Reader` trained on answer spans: the mean of the start- and
    end-position cross-entropies (SQuAD's loss); ``accuracy`` is the fraction of exact starts."""

    def __init__(self, reader, examples: list[ReaderExample]):
        super().__init__()
        self.reader = reader
        self.examples = examples

    @property
    def num_examples(self) -> int:
        return len(self.examples)

    def make_batch(self, indices: list[int], epoch: int) -> dict:
        exs = [self.examples[i] for i in indices]
        return self.reader.features([e.question for e in exs], [e.passage for e in exs],
                                    [e.answer_start for e in exs], [e.answer for e in exs])

    def forward(self, batch: dict) -> tuple[torch.Tensor, dict]:
        targets = ("start_positions", "end_positions")
        start, end = self.reader(**{k: v for k, v in batch.items() if k not in targets})
        ce = nn.functional.cross_entropy
        loss = (ce(start, batch["start_positions"]) + ce(end, batch["end_positions"])) / 2
        return loss, {"accuracy": float((start.argmax(dim=1) == batch["start_positions"]).float().mean())}

    def save(self, directory: str | os.PathLike) -> Path:
        return self.reader.save_pretrained(directory)

"""What a training step computes: bi-encoder, cross-encoder and reader tasks for
:class:`~zsdr.training.trainer.Trainer`.

A task is an ``nn.Module``: ``make_batch(indices, epoch)`` samples and tokenises the examples,
``forward(batch)`` returns ``(loss, logs)``, ``save(directory)`` writes the model.

:class:`BiEncoderTask` losses (``loss``):
* ``pairwise_nll``: each query against its own positive and ``negatives`` sampled negatives
  (ANCE-family ``rdot_nll``; DPR warmup, ANCE episodes);
* ``contrastive``: each query against every positive and negative of the global batch (gathered
  with gradients across processes), inverse temperature ``scale``, other documents labelled
  relevant to the query masked (DDR's REM/DR contrastive loss);
* ``margin_mse``: Margin-MSE against teacher scores of the positive and each negative (KD).

A :class:`~zsdr.training.berm.BermTerm` (BERM) or :class:`~zsdr.training.modir.ModirTerm` (MoDIR)
adds its loss to any of them; MoDIR's domain classifier trains beside the encoder through the
trainer's hooks (``attach``: its optimizer and checkpointed state; ``on_step``: the step count).
A :class:`~zsdr.training.idro.IdroTerm` (COCO-DR's iDRO) or
:class:`~zsdr.training.idro.GroupDroTerm` (``dro``, ``pairwise_nll`` only) replaces the mean over
the queries by a weighted sum over their clusters (``task_loss`` logs the plain mean); its cluster
weights are checkpointed through ``attach``.

``scale`` multiplies the student's similarities into logits for every loss (1 for dot products;
cosine similarities need a temperature, e.g. DDR's 20).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import nn

from zsdr.distributed import gather_objects, gather_with_grad, rank_offset
from zsdr.models.encoder import Encoder
from zsdr.training.data import ReaderExample, TrainingSet

LOSSES = ("pairwise_nll", "contrastive", "margin_mse")


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


class BiEncoderTask(Task):
    def __init__(self, encoder: Encoder, data: TrainingSet, loss: str, negatives: int = 1, scale: float = 1.0,
                 seed: int = 42, berm=None, modir=None, dro=None):
        super().__init__(data, negatives, seed)
        if loss not in LOSSES:
            raise ValueError(f"loss {loss!r}: expected one of {', '.join(LOSSES)}")
        if negatives < 1 and loss != "contrastive":
            raise ValueError(f"loss {loss} needs at least one negative per query")
        if loss == "margin_mse" and data.teacher is None:
            raise ValueError("margin_mse needs teacher scores")
        if dro is not None and loss != "pairwise_nll":
            raise ValueError(f"dro (iDRO / GroupDRO) weights per-query losses and supports loss pairwise_nll only, "
                             f"not {loss}")
        self.encoder = encoder
        self.loss_name = loss
        self.scale = float(scale)
        self.berm = berm  # a zsdr.training.berm.BermTerm added to the loss, or None
        self.modir = modir  # a zsdr.training.modir.ModirTerm (not a submodule: its classifier trains apart)
        self.dro = dro  # a zsdr.training.idro.IdroTerm / GroupDroTerm (not a submodule: its weights are no parameters)

    def attach(self, train_config, total_steps: int, device) -> list:
        """Trainer hook: the stateful parts besides the encoder (checkpointed with it)."""
        parts = []
        if self.modir is not None:
            self.modir.attach(train_config, total_steps, device)
            parts.append(self.modir)
        if self.dro is not None:
            self.dro.attach(device)
            parts.append(self.dro)
        return parts

    def on_step(self, step: int, micro: int, last: bool) -> None:
        """Trainer hook, before each micro-batch: the optimizer step it belongs to."""
        if self.modir is not None:
            self.modir.on_step(step, micro, last)

    def make_batch(self, indices: list[int], epoch: int) -> dict:
        enc, data = self.encoder, self.data
        qids, queries, doc_ids = [], [], []
        for i in indices:
            ex, pos, negs = data.sample(i, epoch, self.seed, self.negatives)
            qids.append(ex.qid)
            queries.append(data.queries[ex.qid])
            doc_ids.extend([pos, *negs])
        batch = {"q": enc.collate(enc.tokenize_queries(queries)),
                 "d": enc.collate(enc.tokenize_docs([data.corpus[did] for did in doc_ids])),
                 "qids": qids, "doc_ids": doc_ids}
        if self.loss_name == "margin_mse":
            group = 1 + self.negatives
            batch["teacher"] = torch.tensor(
                [[data.teacher[q][doc_ids[j * group + c]] for c in range(group)] for j, q in enumerate(qids)],
                dtype=torch.float32)
        if self.berm is not None:
            group = 1 + self.negatives
            pids = doc_ids[::group]
            batch["berm"] = self.berm.batch(enc, qids, pids, [data.corpus[p] for p in pids],
                                            width=batch["d"]["input_ids"].shape[1])
        if self.modir is not None:
            batch["modir"] = self.modir.batch(enc, indices, epoch, len(data))
        if self.dro is not None:
            batch["clusters"] = self.dro.cluster_ids(qids)
        return batch

    def forward(self, batch: dict) -> tuple[torch.Tensor, dict]:
        q = self.encoder(**batch["q"])
        n, group = q.shape[0], 1 + self.negatives
        if self.berm is None:
            d = self.encoder(**batch["d"])
        else:
            d, hidden = self.encoder(**batch["d"], return_hidden=True)
        own = torch.einsum("nd,nkd->nk", q.float(), d.float().view(n, group, -1))
        logs = {"accuracy": float((own.argmax(dim=1) == 0).float().mean())}
        if self.loss_name == "pairwise_nll":
            from zsdr.losses.contrastive import pairwise_nll

            if self.dro is None:
                loss = pairwise_nll(self.scale * own[:, 0], self.scale * own[:, 1:])
            else:
                per_query = pairwise_nll(self.scale * own[:, 0], self.scale * own[:, 1:], reduction="none")
                # the cluster weights move only in training steps (never under no_grad / eval)
                loss, dro_logs = self.dro.loss(per_query, batch["clusters"],
                                               update=self.training and torch.is_grad_enabled())
                logs.update(dro_logs, task_loss=float(per_query.detach().mean()))
        elif self.loss_name == "margin_mse":
            from zsdr.losses.margin_mse import margin_mse

            t = batch["teacher"]
            loss = margin_mse(self.scale * own[:, 0], self.scale * own[:, 1:], t[:, 0], t[:, 1:])
        else:
            from zsdr.losses.contrastive import contrastive, relevance_mask

            all_d = gather_with_grad(d)
            all_ids = gather_objects(batch["doc_ids"])
            offset = rank_offset(d.shape[0])
            targets = offset + torch.arange(n, device=q.device) * group
            mask = relevance_mask([self.data.relevant.get(qid, set()) for qid in batch["qids"]], all_ids).to(q.device)
            loss = contrastive(q, all_d, targets, mask, self.scale)
        if self.berm is not None:
            extra, berm_logs = self.berm.loss(q, d[::group], hidden[::group], batch["berm"])
            logs.update(berm_logs, task_loss=float(loss.detach()))
            loss = loss + extra
        if self.modir is not None:
            extra, modir_logs = self.modir.loss(self.encoder, q, d.view(n, group, -1), batch["modir"])
            logs.update(modir_logs, task_loss=float(loss.detach()))
            loss = loss + extra
        return loss, logs

    def save(self, directory: str | os.PathLike) -> Path:
        return self.encoder.save_pretrained(directory)


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

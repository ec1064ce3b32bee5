"""Fine-tuning a query generator (RMSC's QGen) with the one :class:`~zsdr.training.trainer.Trainer`.

:class:`GeneratorTask` trains a :class:`~zsdr.models.generator.QueryGenerator` on the
``(passage, query)`` pairs of a dataset's qrels (:func:`generator_examples`): the mean token
cross-entropy of the queries given their passages. :func:`build_generator_task` builds it from a
``generator`` recipe spec (:mod:`zsdr.training.recipes`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import torch
from torch import nn

from zsdr.data.store import ById, open_current
from zsdr.io import DataError
from zsdr.models.encoder import set_dropout
from zsdr.models.generator import (DEFAULT_MAX_LENGTH, DEFAULT_QUERY_MAX_LENGTH, IGNORE, QueryGenerator,
                                   passage_of)


def generator_examples(dataset: str | os.PathLike, split: str = "train",
                       max_examples: int | None = None) -> list[tuple[str, str]]:
    """``(passage, query)`` of every positive pair (grade > 0) of ``split``'s qrels of a BEIR
    folder, in qrels order (``max_examples``: the first N), the texts read from the dataset's store
    (:func:`zsdr.data.store.open_current`). A pair naming an unknown query or document raises
    :class:`DataError` naming the qrels file."""
    from zsdr.data.formats import qrels_files, read_qrels

    qrels = read_qrels(dataset, split)
    corpus, queries = (ById(s) for s in open_current(dataset))
    path = qrels_files(dataset)[split]
    out = []
    for qid, docs in qrels.items():
        for did, grade in docs.items():
            if grade <= 0:
                continue
            if qid not in queries or did not in corpus:
                raise DataError(path, None, f"pair ({qid!r}, {did!r}) names a query or document not in {dataset}",
                                "drop the judgement or add the query / document")
            out.append((passage_of(corpus[did]), queries[qid]))
    if not out:
        raise DataError(path, None, f"no positive pair in the {split} qrels", "train on a split with judgements")
    return out[:max_examples] if max_examples else out


class GeneratorTask(nn.Module):
    """A :class:`QueryGenerator` fine-tuned on (passage, query) pairs for the Trainer: the mean
    token cross-entropy of the queries; ``accuracy`` is the fraction of label tokens predicted."""

    def __init__(self, generator: QueryGenerator, examples: Sequence[tuple[str, str]]):
        super().__init__()
        if not examples:
            raise ValueError("no (passage, query) pairs to train the generator on")
        self.generator = generator
        self.examples = list(examples)

    @property
    def num_examples(self) -> int:
        return len(self.examples)

    def make_batch(self, indices: list[int], epoch: int) -> dict:
        exs = [self.examples[i] for i in indices]
        return self.generator.features([p for p, _ in exs], [q for _, q in exs])

    def forward(self, batch: dict) -> tuple[torch.Tensor, dict]:
        labels = batch["labels"]
        logits = self.generator(batch["input_ids"], batch["attention_mask"], labels)
        selected = labels != IGNORE
        logits, targets = logits[selected].float(), labels[selected]
        loss = nn.functional.cross_entropy(logits, targets)
        return loss, {"accuracy": float((logits.detach().argmax(dim=-1) == targets).float().mean())}

    def save(self, directory: str | os.PathLike) -> Path:
        return self.generator.save_pretrained(directory)


def build_generator_task(spec: dict) -> GeneratorTask:
    """The task of a ``generator`` recipe spec: ``init`` (generator folder or Hugging Face id),
    ``dataset`` (BEIR folder), ``split`` ("train"), ``max_length`` (passage tokens, 256),
    ``query_max_length`` (64), ``max_examples`` (null: every positive pair), ``dropout`` (null keeps
    the checkpoint's) and ``train.seed``."""
    torch.manual_seed(int(spec["train"]["seed"]))
    generator = QueryGenerator.from_pretrained(spec["init"], max_length=spec.get("max_length", DEFAULT_MAX_LENGTH),
                                               query_max_length=spec.get("query_max_length", DEFAULT_QUERY_MAX_LENGTH))
    dropout = spec.get("dropout")
    set_dropout(generator.model, dropout)
    if dropout is not None and hasattr(generator.model.config, "dropout_rate"):
        generator.model.config.dropout_rate = float(dropout)  # T5's name for it, saved with the model
    generator.train()
    max_examples = spec.get("max_examples")
    examples = generator_examples(spec["dataset"], spec.get("split", "train"),
                                  None if max_examples is None else int(max_examples))
    return GeneratorTask(generator, examples)

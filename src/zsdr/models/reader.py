"""Extractive QA reader: ``[CLS] question [SEP] passage [SEP]`` -> start and end logits per token.

BERM labels the essential unit of a positive passage with ``h_i = BM25(q, u_i) + δ·r_i``, where
``r_i`` is the largest *start* probability an extractive reader gives a token of unit ``u_i``
(docs/methods/berm.md#labelling-rule). :meth:`Reader.start_probabilities` is that distribution: a softmax of the
start logits over the passage tokens only (question and special tokens excluded), each token
reported with its character span in the passage, so the labeller can map it onto sentences.

The model is Hugging Face's ``AutoModelForQuestionAnswering`` (a released SQuAD reader such as
``deepset/roberta-base-squad2``, or a backbone folder whose span head is initialised freshly and
trained by :class:`~zsdr.training.tasks.ReaderTask`). Training follows the SQuAD convention: an
answer cut off by truncation points at position 0 (``[CLS]`` / ``<s>``), so :meth:`Reader.forward`
masks the logits to the passage tokens plus that position. A folder written by
:meth:`Reader.save_pretrained` holds the model, the tokenizer and ``reader.json`` (maximum length).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Sequence

import torch
from torch import nn

from zsdr.batching import map_by_length, to_device
from zsdr.io import DataError, atomic_dir, verify_model_contents

log = logging.getLogger(__name__)

META_FILE = "reader.json"
PASSAGE = 1  # sequence id of the passage in a (question, passage) pair


class Reader(nn.Module):
    def __init__(self, model: nn.Module, tokenizer, max_length: int = 384):
        super().__init__()
        if not getattr(tokenizer, "is_fast", False):
            raise ValueError(f"the reader needs a fast tokenizer (offsets); {type(tokenizer).__name__} is not one")
        self.model = model
        self.tokenizer = tokenizer
        self.max_length = int(max_length)

    @classmethod
    def from_pretrained(cls, name_or_path: str | os.PathLike, max_length: int | None = None) -> "Reader":
        """A QA model and its tokenizer; a backbone without a span head gets a fresh one.

        ``max_length`` (pair tokens) defaults to the value saved beside the weights, else 384.
        """
        from transformers import AutoModelForQuestionAnswering, AutoTokenizer

        from zsdr.models.loading import quiet_transformers

        folder = Path(name_or_path)
        verify_model_contents(folder)   # a folder zsdr wrote: its files are those it was written with
        meta = json.loads((folder / META_FILE).read_text()) if (folder / META_FILE).is_file() else {}
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(name_or_path))
            with quiet_transformers():
                model, info = AutoModelForQuestionAnswering.from_pretrained(str(name_or_path),
                                                                            output_loading_info=True)
        except OSError as exc:
            raise DataError(name_or_path, None, f"cannot load a reader ({exc})",
                            "pass a Hugging Face id reachable offline or a folder written by save_pretrained") from None
        missing = sorted(info.get("missing_keys", ()))
        if missing:
            log.info("%s: %d weights missing from the checkpoint initialised randomly (e.g. %s; a backbone "
                     "has no span head)", name_or_path, len(missing), missing[0])
        return cls(model, tokenizer, max_length or meta.get("max_length", 384))

    def _encode(self, questions: Sequence[str], passages: Sequence[str]):
        """Padded pairs with offsets; only the passage is ever truncated."""
        if len(questions) != len(passages):
            raise ValueError(f"{len(questions)} questions but {len(passages)} passages")
        return self.tokenizer(list(questions), list(passages), truncation="only_second", max_length=self.max_length,
                              padding=True, return_offsets_mapping=True, return_tensors="pt")

    def features(self, questions: Sequence[str], passages: Sequence[str], answer_starts: Sequence[int] | None = None,
                 answer_texts: Sequence[str] | None = None) -> dict[str, torch.Tensor]:
        """Model inputs of the pairs plus ``passage_mask`` (which positions are passage tokens).

        With answers (character offset into the passage and answer text) it adds the token
        ``start_positions`` / ``end_positions``: the passage tokens holding the answer's first and
        last character, or 0 for both when truncation cut the answer off.
        """
        enc = self._encode(questions, passages)
        offsets = enc.pop("offset_mapping").tolist()
        seq_ids = [enc.sequence_ids(i) for i in range(len(offsets))]
        out = dict(enc)
        out["passage_mask"] = torch.tensor([[s == PASSAGE for s in row] for row in seq_ids])
        if answer_starts is not None:
            if answer_texts is None or len(answer_texts) != len(answer_starts) or len(answer_starts) != len(offsets):
                raise ValueError("give one answer start and one answer text per pair")
            spans = [_answer_tokens(off, ids, int(s), int(s) + len(t))
                     for off, ids, s, t in zip(offsets, seq_ids, answer_starts, answer_texts)]
            out["start_positions"] = torch.tensor([s for s, _ in spans])
            out["end_positions"] = torch.tensor([e for _, e in spans])
        return out

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, passage_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Start and end logits, each ``(n, length)``, float32; positions other than the passage
        tokens and position 0 (the no-answer slot) are set to the lowest float."""
        kwargs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:
            kwargs["token_type_ids"] = token_type_ids
        out = self.model(**kwargs)
        allowed = passage_mask.bool().clone()
        allowed[:, 0] = True
        low = torch.finfo(torch.float32).min
        return (out.start_logits.float().masked_fill(~allowed, low),
                out.end_logits.float().masked_fill(~allowed, low))

    def for_inference(self, device=None, precision: str = "auto") -> "Reader":
        """Move the reader to ``device`` (default: CUDA when available, else the CPU, as the encoder
        chooses) for labelling; on CUDA its weights are cast to ``precision``'s half dtype (fp16 / bf16;
        fp32 keeps float32; always float32 on the CPU). In place: a job's reader is not trained after."""
        from zsdr.models.inference import autocast_dtype, resolve_device

        target = resolve_device(device)
        half = autocast_dtype(target, precision)
        self.model.to(device=target, dtype=half or torch.float32)
        return self

    @torch.no_grad()
    def start_probabilities(self, questions: Sequence[str], passages: Sequence[str], batch_size: int = 64,
                            show_progress: bool = False) -> list[list[tuple[int, int, float]]]:
        """Per pair, ``(char_start, char_end, probability)`` of every passage token that survives
        truncation, in order: the softmax of the start logits over those tokens only.

        On the CPU the pairs are read ``batch_size`` at a time in the order given. On a GPU they are
        tokenised at once, read in batches of similar length (longest first, padded to the batch's
        longest) and the masked softmax is taken on the device, one transfer per batch; results come
        back in the order given either way."""
        if len(questions) != len(passages):
            raise ValueError(f"{len(questions)} questions but {len(passages)} passages")
        was_training = self.training
        self.eval()
        device = next(self.model.parameters()).device
        try:
            if device.type == "cuda":
                return self._start_probabilities_sorted(questions, passages, batch_size, device, show_progress)
            from tqdm.auto import tqdm

            out: list[list[tuple[int, int, float]]] = []
            for i in tqdm(range(0, len(questions), batch_size), desc="reader", unit="batch",
                          disable=not show_progress, leave=False):
                enc = self._encode(questions[i:i + batch_size], passages[i:i + batch_size])
                offsets = enc.pop("offset_mapping").tolist()
                kwargs = to_device(dict(enc), device)
                logits = self.model(**kwargs).start_logits.float().cpu()
                for row, off in enumerate(offsets):
                    cols = [j for j, s in enumerate(enc.sequence_ids(row)) if s == PASSAGE]
                    probs = torch.softmax(logits[row, cols], dim=0).tolist() if cols else []
                    out.append([(off[j][0], off[j][1], p) for j, p in zip(cols, probs)])
            return out
        finally:
            self.train(was_training)

    def _start_probabilities_sorted(self, questions, passages, batch_size: int, device: torch.device,
                                    show_progress: bool) -> list[list[tuple[int, int, float]]]:
        import numpy as np
        from tqdm.auto import tqdm

        enc = self.tokenizer(list(questions), list(passages), truncation="only_second", max_length=self.max_length,
                             padding=False, return_offsets_mapping=True)
        n = len(enc["input_ids"])
        names = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in enc]
        pad = {"input_ids": self.tokenizer.pad_token_id or 0, "attention_mask": 0, "token_type_ids": 0}
        lengths = np.fromiter((len(r) for r in enc["input_ids"]), dtype=np.int64, count=n)
        bar = tqdm(total=n, desc="reader", unit="pair", disable=not show_progress, leave=False)

        def batch(_: int, rows: np.ndarray) -> list[list[tuple[int, int, float]]]:
            width = int(lengths[rows[0]])   # longest first: the batch's first row is its longest
            arrays = {k: np.full((len(rows), width), pad[k], dtype=np.int64) for k in names}
            passage = np.zeros((len(rows), width), dtype=bool)
            for j, i in enumerate(rows):
                m = int(lengths[i])
                for k in names:
                    arrays[k][j, :m] = enc[k][i]
                passage[j, :m] = [s == PASSAGE for s in enc.sequence_ids(int(i))]
            mask = to_device(torch.from_numpy(passage), device)
            logits = self.model(**to_device({k: torch.from_numpy(v) for k, v in arrays.items()}, device)
                                ).start_logits.float().masked_fill(~mask, float("-inf"))
            probs = torch.softmax(logits, dim=1).nan_to_num_(0.0).cpu().numpy()
            bar.update(len(rows))
            return [[(off[c][0], off[c][1], float(probs[j, c])) for c in np.flatnonzero(passage[j])]
                    for j, off in enumerate(enc["offset_mapping"][i] for i in rows)]

        try:
            return map_by_length(batch, lengths, size=batch_size)
        finally:
            bar.close()

    def save_pretrained(self, directory: str | os.PathLike) -> Path:
        with atomic_dir(directory) as tmp:
            self.model.save_pretrained(tmp)
            self.tokenizer.save_pretrained(tmp)
            (tmp / META_FILE).write_text(json.dumps({"max_length": self.max_length}) + "\n")
        return Path(directory)


def _answer_tokens(offsets: Sequence[Sequence[int]], seq_ids: Sequence[int | None], start: int,
                   end: int) -> tuple[int, int]:
    """Token positions of the passage tokens holding characters ``start`` and ``end - 1``; (0, 0)
    when the passage tokens left after truncation do not cover the whole answer."""
    cols = [j for j, s in enumerate(seq_ids) if s == PASSAGE and offsets[j][1] > offsets[j][0]]
    if not cols or offsets[cols[0]][0] > start or offsets[cols[-1]][1] < end:
        return 0, 0
    first = next(j for j in reversed(cols) if offsets[j][0] <= start)
    last = next(j for j in cols if offsets[j][1] >= end)
    return first, last

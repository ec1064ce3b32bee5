"""Cross-encoders: ``[CLS] query [SEP] passage [SEP]`` -> one relevance logit (the KD teachers).

Two heads: ``cls`` is Hugging Face's ``AutoModelForSequenceClassification`` with one label (what
released cross-encoders such as ``cross-encoder/ms-marco-MiniLM-L-6-v2`` are); ``mean`` mean-pools
the last hidden states of the pair and scores them with a linear layer — the mini scale's choice,
since the [CLS] vector of a randomly initialised tiny backbone does not learn within the mini budget
(measured: a CLS cross-encoder ranked the positive first among 29 candidates for 10 % of the
training queries). A folder written by :meth:`CrossEncoder.save_pretrained` holds the backbone,
the tokenizer, ``cross_encoder.json`` (head, maximum length) and, for ``mean``,
``score_head.safetensors``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from torch import nn

from zsdr.io import atomic_dir, verify_model_contents
from zsdr.models.inference import run_in_length_chunks

META_FILE = "cross_encoder.json"
HEAD_FILE = "score_head.safetensors"
HEADS = ("cls", "mean")


class CrossEncoder(nn.Module):
    def __init__(self, model: nn.Module, tokenizer, head: str = "cls", max_length: int = 512, seed: int = 0):
        super().__init__()
        if head not in HEADS:
            raise ValueError(f"cross-encoder head {head!r}: expected one of {', '.join(HEADS)}")
        self.model = model
        self.tokenizer = tokenizer
        self.head = head
        self.max_length = int(max_length)
        self.score = None
        self.chunk_tokens: int | None = None  # see Encoder.chunk_tokens
        if head == "mean":
            gen = torch.Generator().manual_seed(seed)
            self.score = nn.Linear(model.config.hidden_size, 1)
            with torch.no_grad():
                self.score.weight.normal_(0.0, 0.02, generator=gen)
                self.score.bias.zero_()

    @classmethod
    def from_pretrained(cls, name_or_path: str | os.PathLike, head: str | None = None,
                        max_length: int | None = None) -> "CrossEncoder":
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        from zsdr.models.checkpoints import check_vocabulary
        from zsdr.models.loading import load_backbone, quiet_transformers

        folder = Path(name_or_path)
        verify_model_contents(folder)   # a folder zsdr wrote: its files are those it was written with
        meta = json.loads((folder / META_FILE).read_text()) if (folder / META_FILE).is_file() else {}
        head = head or meta.get("head", "cls")
        max_length = max_length or meta.get("max_length", 512)
        tokenizer = AutoTokenizer.from_pretrained(str(name_or_path))
        with quiet_transformers():
            if head == "cls":
                model = AutoModelForSequenceClassification.from_pretrained(str(name_or_path), num_labels=1)
            else:  # without the (unused) pooler, so DDP sees no parameter without a gradient
                model = load_backbone(str(name_or_path))
        check_vocabulary(name_or_path, tokenizer, model)
        encoder = cls(model, tokenizer, head, max_length)
        if encoder.score is not None and (folder / HEAD_FILE).is_file():
            from safetensors.torch import load_file

            encoder.score.load_state_dict(load_file(str(folder / HEAD_FILE)))
        return encoder

    def features(self, queries: list[str], passages: list[str]) -> dict[str, torch.Tensor]:
        enc = self.tokenizer(queries, passages, truncation="only_second", max_length=self.max_length,
                             padding=True, return_tensors="pt")
        return dict(enc)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """One logit per pair, shape ``(n,)``; on the CPU in chunks of similar lengths as
        :meth:`Encoder.forward <zsdr.models.encoder.Encoder.forward>` (``chunk_tokens``)."""
        kwargs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:
            kwargs["token_type_ids"] = token_type_ids
        chunk = self.chunk_tokens if input_ids.device.type == "cpu" else None
        return run_in_length_chunks(self._forward, kwargs, chunk)

    def _forward(self, **kwargs) -> torch.Tensor:
        attention_mask = kwargs["attention_mask"]
        if self.head == "cls":
            return self.model(**kwargs).logits.float().view(-1)
        hidden = self.model(**kwargs).last_hidden_state.float()
        mask = attention_mask.unsqueeze(-1).float()
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return self.score(pooled).view(-1)

    def save_pretrained(self, directory: str | os.PathLike) -> Path:
        with atomic_dir(directory) as tmp:
            self.model.save_pretrained(tmp)
            self.tokenizer.save_pretrained(tmp)
            (tmp / META_FILE).write_text(json.dumps({"head": self.head, "max_length": self.max_length}) + "\n")
            if self.score is not None:
                from safetensors.torch import save_file

                save_file({k: v.detach().cpu().contiguous() for k, v in self.score.state_dict().items()},
                          str(tmp / HEAD_FILE))
        return Path(directory)

"""Query generation (QGen): a seq2seq model writes queries for a passage.

RMSC's third kind of weak pair is BEIR's QGen: a T5 query generator fine-tuned on MS MARCO
(``BeIR/query-gen-msmarco-t5-base-v1``) samples several queries per document (top-k 25,
nucleus 0.95, at most 64 tokens, three per passage in BEIR's example) and the document is their
positive. The generator reads ``title + " " + text``.

* :class:`QueryGenerator` wraps any Hugging Face seq2seq model and its tokenizer: a released id or
  a folder written by :meth:`QueryGenerator.save_pretrained` (model, tokenizer and ``generator.json``
  with the passage and query lengths).
* :func:`build_tiny_generator` builds a randomly initialised T5 on the tokenizer of a tiny
  backbone, for the mini scale where no checkpoint can be downloaded.

Fine-tuning a generator on the (passage, query) pairs of a dataset's qrels is
:mod:`zsdr.training.qgen` (recipe kind ``generator``); writing the generated pairs in the weak-pair
format is :func:`zsdr.training.weak.qgen_pairs.write_qgen_pairs`.

Labels follow the tokenizer's own target convention (``tokenizer(text_target=...)``): a T5
tokenizer gives ``query </s>``; the tiny backbones' tokenizers frame the query as ``[CLS] q [SEP]`` /
``<s> q </s>``, and the tiny T5 stops at ``[SEP]`` / ``</s>`` (its ``eos_token_id``). The decoder
starts from the pad token, as T5 does.

Sampling is deterministic on the CPU for a given seed and batch size: each batch of passages
seeds torch from ``(seed, batch index, round)`` inside :func:`torch.random.fork_rng`, so the
caller's random state is left as it was. Generations are stripped and empty ones dropped; a
passage left with fewer than ``n`` queries is sampled again (``retries`` more rounds, two by
default) and then accepts fewer, so a list may hold fewer than ``n`` queries but never an empty
one. Repeated queries are kept by :meth:`QueryGenerator.generate` and written once per document
by :func:`~zsdr.training.weak.qgen_pairs.write_qgen_pairs`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch import nn

from zsdr.batching import to_device
from zsdr.io import DataError, atomic_dir, verify_model_contents

META_FILE = "generator.json"
BUILD_FILE = "backbone.json"  # what build_tiny_generator built (as zsdr.models.tiny writes for backbones)
IGNORE = -100
DEFAULT_MAX_LENGTH = 256
DEFAULT_QUERY_MAX_LENGTH = 64
_SAMPLE_STREAM = 3  # fourth seed word of the sampling seeds (see zsdr.training.weak for the others)


def passage_of(doc: dict) -> str:
    """What the generator reads of a document: title and text joined by a space, stripped."""
    return f"{doc.get('title') or ''} {doc['text']}".strip()


def _sample_seed(seed, batch: int, round_: int) -> int:
    words = [int(s) for s in (seed if isinstance(seed, (list, tuple)) else [seed])]
    state = np.random.SeedSequence([*words, int(batch), int(round_), _SAMPLE_STREAM]).generate_state(1, np.uint64)
    return int(state[0])


class QueryGenerator(nn.Module):
    """A seq2seq query generator: ``passage -> query``."""

    def __init__(self, model: nn.Module, tokenizer, max_length: int = DEFAULT_MAX_LENGTH,
                 query_max_length: int = DEFAULT_QUERY_MAX_LENGTH):
        super().__init__()
        if tokenizer.pad_token_id is None:
            raise ValueError(f"the generator's tokenizer ({type(tokenizer).__name__}) has no pad token")
        self.model = model
        self.tokenizer = tokenizer
        self.max_length = int(max_length)
        self.query_max_length = int(query_max_length)

    @classmethod
    def from_pretrained(cls, name_or_path: str | os.PathLike, max_length: int | None = None,
                        query_max_length: int | None = None) -> "QueryGenerator":
        """A seq2seq model (``AutoModelForSeq2SeqLM``) and its tokenizer: a Hugging Face id (e.g.
        ``BeIR/query-gen-msmarco-t5-base-v1``) or a folder. The passage and query lengths (in
        tokens) default to those saved in the folder's ``generator.json``, else 256 and 64. A model
        that cannot be loaded as seq2seq raises :class:`DataError`."""
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

        from zsdr.models.loading import quiet_transformers

        folder = Path(name_or_path)
        verify_model_contents(folder)   # a folder zsdr wrote: its files are those it was written with
        meta = json.loads((folder / META_FILE).read_text()) if (folder / META_FILE).is_file() else {}
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(name_or_path))
            with quiet_transformers():
                model = AutoModelForSeq2SeqLM.from_pretrained(str(name_or_path))
        except (OSError, ValueError) as exc:
            raise DataError(name_or_path, None, f"cannot load a seq2seq query generator ({exc})",
                            "pass a Hugging Face seq2seq id reachable offline (e.g. a T5 query generator) or a "
                            "folder written by build_tiny_generator / QueryGenerator.save_pretrained") from None
        return cls(model, tokenizer, max_length or meta.get("max_length", DEFAULT_MAX_LENGTH),
                   query_max_length or meta.get("query_max_length", DEFAULT_QUERY_MAX_LENGTH))

    def save_pretrained(self, directory: str | os.PathLike) -> Path:
        """Model, tokenizer and ``generator.json`` (the lengths), written atomically."""
        with atomic_dir(directory) as tmp:
            self.model.save_pretrained(tmp)
            self.tokenizer.save_pretrained(tmp)
            (tmp / META_FILE).write_text(json.dumps({"max_length": self.max_length,
                                                     "query_max_length": self.query_max_length}) + "\n")
        return Path(directory)

    def _encode(self, passages: Sequence[str]):
        return self.tokenizer(list(passages), max_length=self.max_length, truncation=True, padding=True,
                              return_tensors="pt", return_token_type_ids=False)

    def features(self, passages: Sequence[str], queries: Sequence[str]) -> dict[str, torch.Tensor]:
        """``input_ids`` / ``attention_mask`` of the passages (at most ``max_length`` tokens) and
        ``labels``: the queries as targets (at most ``query_max_length`` tokens), padding -100."""
        if len(passages) != len(queries):
            raise ValueError(f"{len(passages)} passages but {len(queries)} queries")
        enc = self._encode(passages)
        target = self.tokenizer(text_target=list(queries), max_length=self.query_max_length, truncation=True,
                                padding=True, return_tensors="pt", return_token_type_ids=False)
        labels = target["input_ids"].masked_fill(target["attention_mask"] == 0, IGNORE)
        return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"], "labels": labels}

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Logits ``(n, label length, vocabulary)`` of each label token given the ones before it
        (teacher forcing: the decoder reads the labels shifted right behind its start token)."""
        prepare = getattr(self.model, "prepare_decoder_input_ids_from_labels", None)
        if prepare is None:
            return self.model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).logits
        return self.model(input_ids=input_ids, attention_mask=attention_mask,
                          decoder_input_ids=prepare(labels=labels)).logits

    def for_inference(self, device=None, precision: str = "auto") -> "QueryGenerator":
        """Move the generator to ``device`` (default: CUDA when available, else the CPU, as the encoder
        chooses) for generation; on CUDA its weights are cast to a half dtype: bf16 for ``bf16``,
        ``auto`` and (where the GPU has bf16) ``fp16``, since T5's activations overflow fp16's range;
        fp16 only on a GPU without bf16; ``fp32`` keeps float32, as does the CPU always. In place: a
        job's generator is not trained after."""
        from zsdr.models.inference import autocast_dtype, resolve_device

        target = resolve_device(device)
        half = autocast_dtype(target, precision)
        if half == torch.float16 and torch.cuda.is_bf16_supported():
            half = torch.bfloat16
        self.model.to(device=target, dtype=half or torch.float32)
        return self

    @torch.no_grad()
    def generate(self, passages: Sequence[str], n: int, *, top_k: int = 25, top_p: float = 0.95,
                 max_length: int = 64, batch_size: int = 32, seed: int | Sequence[int] = 0, device=None,
                 retries: int = 2) -> list[list[str]]:
        """Up to ``n`` sampled queries per passage (top-k / nucleus sampling, at most ``max_length``
        tokens each, the decoder's start token included as in ``transformers``' ``max_length``).

        Batch ``b`` (``batch_size`` passages) seeds torch from ``(seed, b, round)``; round 0 samples
        ``n`` queries per passage, and each of ``retries`` further rounds samples ``n`` again for the
        passages still short of ``n`` non-empty queries. Deterministic on the CPU for the same
        seed and batch size. ``device`` (default: where the model is) moves the model there.
        """
        if n < 1:
            raise ValueError(f"n {n} must be >= 1 queries per passage")
        if batch_size < 1:
            raise ValueError(f"batch_size {batch_size} must be >= 1")
        if device is not None:
            self.model.to(device)
        device = next(self.model.parameters()).device
        was_training = self.training
        self.eval()
        out: list[list[str]] = [[] for _ in passages]
        try:
            for b, start in enumerate(range(0, len(passages), batch_size)):
                rows = range(start, min(start + batch_size, len(passages)))
                for round_ in range(1 + max(int(retries), 0)):
                    need = [i for i in rows if len(out[i]) < n]
                    if not need:
                        break
                    texts = self._sample([passages[i] for i in need], n, _sample_seed(seed, b, round_), device,
                                         top_k=top_k, top_p=top_p, max_length=max_length)
                    for i, queries in zip(need, texts):
                        out[i].extend(queries[:n - len(out[i])])
        finally:
            self.train(was_training)
        return out

    def _sample(self, passages: list[str], n: int, seed: int, device: torch.device, **sampling) -> list[list[str]]:
        """``n`` sampled generations per passage, stripped, the empty ones dropped."""
        enc = self._encode(passages)
        cuda = []  # the CUDA device whose random state fork_rng saves and restores
        if device.type == "cuda":
            cuda = [device.index if device.index is not None else torch.cuda.current_device()]
        with torch.random.fork_rng(devices=cuda):
            torch.manual_seed(seed)
            ids = self.model.generate(input_ids=to_device(enc["input_ids"], device),
                                      attention_mask=to_device(enc["attention_mask"], device), do_sample=True,
                                      num_return_sequences=n, **sampling)
        texts = [t.strip() for t in self.tokenizer.batch_decode(ids, skip_special_tokens=True)]
        return [[t for t in texts[j * n:(j + 1) * n] if t] for j in range(len(passages))]


def build_tiny_generator(tokenizer_dir: str | os.PathLike, out: str | os.PathLike, size: dict, seed: int) -> dict:
    """A randomly initialised ``T5ForConditionalGeneration`` on the tokenizer saved in
    ``tokenizer_dir`` (a tiny BERT or RoBERTa backbone folder), saved with that tokenizer to ``out``
    (atomically, with ``backbone.json``: the returned summary).

    ``size``: ``hidden`` (d_model), ``intermediate`` (d_ff), ``layers`` (encoder and decoder each),
    ``heads`` (d_kv = hidden / heads) and optionally ``dropout`` (0.1). The pad token is T5's pad
    and decoder start; the end token is the tokenizer's ``eos`` (``</s>``), else its ``[SEP]``.
    """
    from transformers import AutoTokenizer, T5Config, T5ForConditionalGeneration

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id
    if tokenizer.pad_token_id is None or eos is None:
        raise ValueError(f"{tokenizer_dir}: the tokenizer needs a pad token and an end token (eos or sep)")
    hidden, heads = int(size["hidden"]), int(size["heads"])
    if hidden % heads:
        raise ValueError(f"hidden size {hidden} is not a multiple of {heads} heads")
    config = T5Config(vocab_size=len(tokenizer), d_model=hidden, d_ff=int(size["intermediate"]),
                      num_layers=int(size["layers"]), num_decoder_layers=int(size["layers"]), num_heads=heads,
                      d_kv=hidden // heads, dropout_rate=float(size.get("dropout", 0.1)),
                      pad_token_id=tokenizer.pad_token_id, eos_token_id=eos,
                      decoder_start_token_id=tokenizer.pad_token_id)
    torch.manual_seed(seed)
    model = T5ForConditionalGeneration(config)
    summary = {"kind": "t5", "tokenizer": str(tokenizer_dir), "vocab_size": len(tokenizer),
               "parameters": sum(p.numel() for p in model.parameters()), "seed": seed, **size}
    with atomic_dir(out) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / BUILD_FILE).write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return summary

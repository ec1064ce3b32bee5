"""Batched inference: devices and precision, tokenised texts as flat arrays, length-bucketed batches.

:func:`embed_packed` is the loop of :meth:`Encoder.encode_tokenized
<zsdr.models.encoder.Encoder.encode_tokenized>`: texts sorted by length (longest first), cut into
batches by a token budget and written back in input order (:func:`zsdr.batching.map_by_length`), padded
from :class:`Packed` arrays on the CPU while the GPU runs the previous batch. :func:`encode_in_chunks`
tokenises documents a chunk at a time in a worker thread (:func:`prefetched`) while the previous chunk is
encoded. :func:`run_in_length_chunks` runs a training forward over a padded batch in chunks of similar
lengths (the same helper, shortest first), each padded only to its own longest row. :func:`cls_vectors` is
a bare backbone's last-layer [CLS] state of texts (COCO-DR's span vectors), with no encoder settings at all.
"""

from __future__ import annotations

import contextvars
import itertools
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

from zsdr.batching import map_by_length, to_device
from zsdr.models.settings import PRECISIONS
from zsdr.models.texts import is_context


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """``device`` as a ``torch.device``; ``None`` picks CUDA when available, else the CPU."""
    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def autocast_dtype(device: torch.device, precision: str) -> torch.dtype | None:
    """The autocast dtype for ``precision`` on ``device``: ``None`` means full fp32 (always on the CPU)."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r} (expected one of {', '.join(PRECISIONS)})")
    if device.type != "cuda" or precision == "fp32":
        return None
    if precision == "auto":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.bfloat16 if precision == "bf16" else torch.float16


@dataclass(eq=False)
class Packed:
    """Tokenised texts as flat arrays: every row's ids one after the other (``ids``, int64, and
    ``types`` for token types, or ``None``), with each row's ``starts`` and ``lengths``. Padding a
    batch of any rows is then a handful of numpy operations (:meth:`pad`), with no loop over rows."""

    ids: np.ndarray
    types: np.ndarray | None
    starts: np.ndarray
    lengths: np.ndarray

    @classmethod
    def of(cls, features: dict[str, list[list[int]]]) -> "Packed":
        rows = features["input_ids"]
        lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
        total = int(lengths.sum())
        ids = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64, count=total)
        types = features.get("token_type_ids")
        if types is not None:
            types = np.fromiter(itertools.chain.from_iterable(types), dtype=np.int64, count=total)
        starts = np.zeros_like(lengths)
        if len(lengths) > 1:
            np.cumsum(lengths[:-1], out=starts[1:])
        return cls(ids, types, starts, lengths)

    def __len__(self) -> int:
        return len(self.lengths)

    def __eq__(self, other) -> bool:
        if not isinstance(other, Packed) or (self.types is None) != (other.types is None):
            return NotImplemented if not isinstance(other, Packed) else False
        return all(np.array_equal(a, b) for a, b in zip((self.ids, self.types, self.starts, self.lengths),
                                                        (other.ids, other.types, other.starts, other.lengths)))

    def pad(self, rows: Sequence[int] | np.ndarray | None, pad_id: int) -> dict[str, np.ndarray]:
        """``input_ids`` (``pad_id`` after each row's end), ``attention_mask`` (and ``token_type_ids``,
        0 after the end) of ``rows`` (default: all, in order), right-padded to the longest of them."""
        rows = np.arange(len(self)) if rows is None else np.asarray(rows, dtype=np.int64)
        if len(rows) == 0:
            raise ValueError("no rows to pad")
        lengths = self.lengths[rows]
        width = int(lengths.max())
        mask = np.arange(width)[None, :] < lengths[:, None]
        out = {"input_ids": np.full((len(rows), width), pad_id, dtype=np.int64),
               "attention_mask": mask.astype(np.int64)}
        take = (self.starts[rows][:, None] + np.arange(width)[None, :])[mask]
        out["input_ids"][mask] = self.ids[take]
        if self.types is not None:
            out["token_type_ids"] = np.zeros((len(rows), width), dtype=np.int64)
            out["token_type_ids"][mask] = self.types[take]
        return out


PREFETCH_CHUNK = 16_384  # documents tokenised ahead of the GPU at a time (Encoder.encode_docs)


def prefetched(items: Iterator[Any]) -> Iterator[Any]:
    """The items of a lazy iterator, each computed in a worker thread while the caller works on the
    previous one (the tokenizer and numpy release the GIL for most of their work)."""
    from concurrent.futures import ThreadPoolExecutor

    items = iter(items)
    done = object()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="prefetch") as pool:
        pending = pool.submit(next, items, done)
        while (ready := pending.result()) is not done:
            pending = pool.submit(next, items, done)
            yield ready


_CHUNK_ROWS: contextvars.ContextVar[torch.Tensor | None] = contextvars.ContextVar("chunk_rows", default=None)


def chunk_rows() -> torch.Tensor | None:
    """While :func:`run_in_length_chunks` runs a chunk: the chunk's rows (indices into the whole batch, in the
    chunk's order); ``None`` outside a chunk (a whole batch). Hooks that attribute a layer's rows to texts read it
    (iDRO's one-pass cluster gradients, :mod:`zsdr.training.idro_onepass`)."""
    return _CHUNK_ROWS.get()


def run_in_length_chunks(fn: Callable[..., Any], features: dict[str, torch.Tensor], max_tokens: int | None,
                         token_outputs: Sequence[int] = ()) -> Any:
    """``fn(**features)`` over a right-padded batch (``input_ids``, ``attention_mask``, ...), run chunk by chunk
    (:func:`zsdr.batching.length_batches` shortest first: a chunk holds rows while ``rows x its longest row`` stays
    within ``max_tokens``, at least one row), each chunk's tensors cut to its longest row, and the outputs put back
    in row order.
    Padding changes no number here (masked attention, masked pooling) but costs time: a mini training step (the
    64-wide 2-layer model, 32 queries and 128 passages of 44-91 tokens, one thread) took 0.75x the CPU time in
    chunks of at most 2,048 tokens, 0.98x with 64 passages (benchmarks/cpu_chunks.py). ``fn`` returns a tensor or a tuple of tensors with one row per input row; those at ``token_outputs``
    (positions in the tuple) are per-token ``(rows, length, ...)`` and come back zero-padded to the batch's
    length. The result equals one call's to float rounding (each row's numbers do not depend on the other
    rows); ``max_tokens`` ``None``, or a batch within it, is one call."""
    if not max_tokens:
        return fn(**features)
    mask = features["attention_mask"]
    lengths = mask.sum(dim=1)
    if len(lengths) == 0 or len(lengths) * max(int(lengths.max()), 1) <= int(max_tokens):
        return fn(**features)   # the whole batch fits one chunk: one call
    width = mask.shape[1]

    def chunk(_: int, rows: np.ndarray):
        rows = torch.from_numpy(rows).to(mask.device)
        cut = max(int(lengths[rows].max()), 1)
        token = _CHUNK_ROWS.set(rows)
        try:
            out = fn(**{k: (v[rows, :cut] if v is not None and v.dim() > 1 else v) for k, v in features.items()})
        finally:
            _CHUNK_ROWS.reset(token)
        if not isinstance(out, tuple):
            return out
        return tuple(torch.nn.functional.pad(t, (0, 0) * (t.dim() - 2) + (0, width - t.shape[1]))
                     if i in token_outputs else t for i, t in enumerate(out))

    return map_by_length(chunk, lengths, max_tokens=int(max_tokens), longest_first=False)


def embed_packed(packed: Packed, embed: Callable[[dict[str, torch.Tensor]], torch.Tensor], *, dim: int,
                 target: torch.device, pad_id: int, budget: int, show_progress: bool = False,
                 desc: str = "encode") -> np.ndarray:
    """``(len(packed), dim)`` float32 vectors of ``embed`` (a batch of padded tensors on ``target`` ->
    its vectors) over ``packed`` in batches of at most ``budget`` tokens, padding included, longest
    texts first; rows come back in input order. On a GPU the batches are copied from pinned memory
    asynchronously and the results stay on the device until the end (one synchronisation)."""
    from tqdm.auto import tqdm

    if len(packed) == 0:
        return np.empty((0, dim), dtype=np.float32)
    bar = tqdm(total=len(packed), desc=desc, unit="text", disable=not show_progress, leave=False)

    def batch(_: int, rows: np.ndarray) -> torch.Tensor:
        emb = embed(to_device({k: torch.from_numpy(v) for k, v in packed.pad(rows, pad_id).items()}, target))
        bar.update(len(rows))
        return emb.float()

    try:
        with torch.inference_mode():
            # results stay on the device until the end: one transfer, no synchronisation per batch
            out = map_by_length(batch, packed.lengths, max_tokens=budget)
    finally:
        bar.close()
    return out.cpu().numpy()


def encode_in_chunks(docs: list, contexts, chunk_size: int, tokenize: Callable[[list, Any], dict],
                     encode: Callable[[Packed], np.ndarray]) -> np.ndarray:
    """The vectors of ``docs``, tokenised ``chunk_size`` at a time (``tokenize(docs, contexts)``) in a
    worker thread while ``encode`` embeds the previous chunk. ``contexts``: ``None``, one
    ``(domain, relevance)`` pair for all, or one pair per document."""
    many = contexts is not None and not is_context(contexts)
    if many and len(contexts) != len(docs):
        raise ValueError(f"{len(contexts)} contexts for {len(docs)} texts (give one (domain, relevance) pair per "
                         "text, a single pair, or None)")

    def chunk(start: int) -> Packed:
        part = contexts[start:start + chunk_size] if many else contexts
        return Packed.of(tokenize(docs[start:start + chunk_size], part))

    return np.concatenate([encode(packed) for packed in prefetched(map(chunk, range(0, len(docs), chunk_size)))])


def cls_vectors(model_dir: str | os.PathLike, texts: Sequence[str], batch_size: int = 128, max_length: int = 128,
                device=None) -> torch.Tensor:
    """``(len(texts), dim)`` float32 on the CPU: the last-layer [CLS] state of each text, encoded in eval
    mode as ``[CLS] text [SEP]`` truncated to ``max_length`` (at most the tokenizer's
    ``model_max_length``), ``batch_size`` texts at a time, by the backbone of ``model_dir`` loaded as
    the project's encoders load theirs (no pooler; any backbone, with or without a Condenser head).
    ``device``: None picks CUDA when available."""
    from transformers import AutoTokenizer

    from zsdr.models.loading import load_backbone

    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    limit = getattr(tokenizer, "model_max_length", None)
    if limit is not None and limit < 1_000_000:
        max_length = min(int(max_length), int(limit))
    model = load_backbone(str(model_dir)).to(device).eval()
    out = []
    with torch.no_grad():
        for start in range(0, len(texts), int(batch_size)):
            enc = tokenizer(list(texts[start:start + int(batch_size)]), truncation=True, max_length=int(max_length),
                            padding=True, return_tensors="pt")
            enc = to_device({k: v for k, v in enc.items() if k in ("input_ids", "attention_mask", "token_type_ids")},
                            device)
            out.append(model(**enc).last_hidden_state[:, 0].float().cpu())
    return torch.cat(out) if out else torch.empty((0, 0))

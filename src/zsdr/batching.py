"""Batches of similar lengths with the input order restored, and a batch's copy to its device.

Every loop that runs a model over many texts cuts them the same way (:func:`length_batches`): the rows
sorted by length (longest first, or shortest first), ties in input order (a stable sort), then cut into
consecutive batches of at most ``size`` rows and at most ``max_tokens`` tokens once padded to the batch's
longest row (at least one row; a row counts at least one token). :func:`map_by_length` runs a function
over those batches and puts its per-row results back in input order. Its users: the encoder's inference
(:func:`zsdr.models.inference.embed_packed`, a token budget, longest first), a CPU forward in chunks
(:func:`zsdr.models.inference.run_in_length_chunks`, a token budget, shortest first), the reader's start
probabilities on a GPU (:meth:`zsdr.models.reader.Reader.start_probabilities`), the cross-encoder's teacher
scores (:func:`zsdr.training.teacher.score_pairs`) and QGen's sorted pools
(:func:`zsdr.training.weak.qgen_pairs.write_qgen_pairs`), the last three ``size`` rows a batch.

:func:`to_device` is the one host-to-device copy of a batch (a tensor, or a dict, list or tuple of them):
onto a CUDA device through pinned memory without waiting on the host, elsewhere a plain move. The
training loop's batches go through it, and those of the encoder, the bare backbone's [CLS] vectors, the reader,
the teacher, the query generator and BERM's unit analysis.

Sorting changes which rows share a batch, never a row's own numbers beyond float rounding (a padded row's
outputs do not depend on its neighbours: masked attention and pooling); restoring the order returns
exact copies of what each batch gave.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch


def _lengths(lengths) -> np.ndarray:
    if isinstance(lengths, torch.Tensor):
        lengths = lengths.detach().to("cpu", torch.long).numpy()
    return np.asarray(lengths, dtype=np.int64).reshape(-1)


def length_order(lengths, *, longest_first: bool = True) -> np.ndarray:
    """The rows sorted by ``lengths`` (longest first, or shortest first), ties in input order."""
    lengths = _lengths(lengths)
    return np.argsort(-lengths if longest_first else lengths, kind="stable")


def _check(size: int | None, max_tokens: int | None) -> None:
    if size is None and max_tokens is None:
        raise ValueError("length batches need a size (rows a batch) or max_tokens (padded tokens a batch), or both")
    if size is not None and int(size) < 1:
        raise ValueError(f"batch size {size} must be >= 1")
    if max_tokens is not None and int(max_tokens) < 1:
        raise ValueError(f"max_tokens {max_tokens} must be >= 1")


def length_batches(lengths, *, size: int | None = None, max_tokens: int | None = None,
                   longest_first: bool = True) -> list[np.ndarray]:
    """The rows of each batch (int64 indices into ``lengths``), in the order they are run: the rows in
    :func:`length_order`, cut into consecutive batches each holding at most ``size`` rows and, once padded to
    its longest row, at most ``max_tokens`` tokens (a row counts at least one token); every batch holds at
    least one row, so a row longer than ``max_tokens`` runs alone."""
    _check(size, max_tokens)
    lengths = _lengths(lengths)
    order = length_order(lengths, longest_first=longest_first)
    widths = np.maximum(lengths[order], 1)
    n = len(order)
    cap = n if size is None else int(size)
    bounds, start = [], 0
    while start < n:
        if max_tokens is None:
            stop = min(n, start + cap)
        elif longest_first:   # the first row is the widest: its width sets the batch's rows
            stop = min(n, start + cap, start + max(int(max_tokens) // int(widths[start]), 1))
        else:                 # the last row is the widest: grow while rows x the newest row fits
            stop = start + 1
            while stop < n and stop - start < cap and (stop + 1 - start) * int(widths[stop]) <= int(max_tokens):
                stop += 1
        bounds.append(order[start:stop])
        start = stop
    return bounds


class _InputOrder:
    """Per-row results put back in input order as the batches come: tensors (the first dimension rows) into
    one tensor of all rows on the results' device, anything else into a list."""

    def __init__(self, n: int, order: np.ndarray):
        self.n, self.order, self.done = n, order, 0
        self.out: Any = None
        self.index: torch.Tensor | None = None   # the rows' order on the results' device, moved once

    def _put(self, slot, rows: slice, result):
        if isinstance(result, torch.Tensor):
            if slot is None:
                slot = torch.empty((self.n, *result.shape[1:]), dtype=result.dtype, device=result.device)
                if self.index is None or self.index.device != result.device:
                    self.index = torch.from_numpy(self.order).to(result.device)
            return slot.index_copy_(0, self.index[rows], result)
        if slot is None:
            slot = [None] * self.n
        for i, value in zip(self.order[rows].tolist(), result, strict=True):
            slot[i] = value
        return slot

    def add(self, count: int, result) -> None:
        rows = slice(self.done, self.done + count)
        if isinstance(result, tuple):
            if self.out is None:
                self.out = [None] * len(result)
            self.out = [self._put(slot, rows, r) for slot, r in zip(self.out, result, strict=True)]
        else:
            self.out = self._put(self.out, rows, result)
        self.done += count


def map_by_length(fn: Callable[[int, np.ndarray], Any], lengths, *, size: int | None = None,
                  max_tokens: int | None = None, longest_first: bool = True):
    """``fn(b, rows)`` over the :func:`length_batches` of ``lengths`` (``b`` counts the batches from 0,
    ``rows`` their indices), its per-row results back in input order: a tensor (one row per row of the
    batch) gives one tensor of ``len(lengths)`` rows on its device, in its dtype (the batches' results copied
    in as they come, with autograd, so nothing but the result is held); a tuple of tensors a tuple of them;
    a sequence (one item per row) a list; ``None`` nothing (``fn`` kept its results itself): the call
    returns ``None``. No rows: ``[]``."""
    n = len(_lengths(lengths))
    batches = length_batches(lengths, size=size, max_tokens=max_tokens, longest_first=longest_first)
    collected = _InputOrder(n, np.concatenate(batches) if batches else np.empty(0, dtype=np.int64))
    many = False
    for b, rows in enumerate(batches):
        result = fn(b, rows)
        if result is not None:
            many = isinstance(result, tuple)
            collected.add(len(rows), result)
    if collected.out is None:
        return [] if n == 0 else None
    return tuple(collected.out) if many else collected.out


def to_device(batch: Any, device: str | torch.device) -> Any:
    """``batch`` (a tensor, or a dict, list or tuple of tensors; anything else as it is) on ``device``: a CPU
    tensor bound for a CUDA device through pinned memory, without waiting on the host (already pinned
    memory is used as it is); any other move a plain copy."""
    device = torch.device(device)
    if isinstance(batch, torch.Tensor):
        if device.type == "cuda" and batch.device.type == "cpu":
            return batch.pin_memory().to(device, non_blocking=True)
        return batch.to(device)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)) and batch and isinstance(batch[0], torch.Tensor):
        return type(batch)(to_device(v, device) for v in batch)
    return batch

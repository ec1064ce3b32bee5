"""Cross-process helpers that keep gradients: in-batch negatives across all devices.

:func:`gather_with_grad` concatenates a tensor from every process in rank order. Its backward
sums the incoming gradient over all processes (an all-reduce, which every backend supports,
gloo included) and hands each process the slice of its own rows: with each process computing
the mean loss of its own queries against the gathered documents and DDP averaging the gradients,
the update equals that of one process holding the whole global batch.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


class _GatherWithGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor: torch.Tensor) -> torch.Tensor:
        world, rank = dist.get_world_size(), dist.get_rank()
        sizes = [torch.zeros(1, dtype=torch.long, device=tensor.device) for _ in range(world)]
        dist.all_gather(sizes, torch.tensor([tensor.shape[0]], device=tensor.device))
        sizes = [int(s.item()) for s in sizes]
        width = max(sizes)
        padded = tensor.new_zeros((width, *tensor.shape[1:]))
        padded[: tensor.shape[0]] = tensor
        parts = [torch.empty_like(padded) for _ in range(world)]
        dist.all_gather(parts, padded.contiguous())
        ctx.sizes, ctx.rank = sizes, rank
        return torch.cat([p[:n] for p, n in zip(parts, sizes)], dim=0)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM)
        start = sum(ctx.sizes[: ctx.rank])
        return grad[start: start + ctx.sizes[ctx.rank]]


def gather_with_grad(tensor: torch.Tensor) -> torch.Tensor:
    """Rows of ``tensor`` from every process, in rank order; the identity in a single process."""
    if not is_distributed():
        return tensor
    return _GatherWithGrad.apply(tensor)


def gather_objects(items: list) -> list:
    """A Python list from every process, concatenated in rank order (no gradient)."""
    if not is_distributed():
        return list(items)
    out: list = [None] * dist.get_world_size()
    dist.all_gather_object(out, list(items))
    return [x for part in out for x in part]


def rank_offset(n_local: int) -> int:
    """Where this process's rows start in a gathered tensor."""
    if not is_distributed():
        return 0
    sizes = gather_objects([n_local])
    return sum(sizes[: dist.get_rank()])

"""iDRO's cluster gradients from the training step's own backward pass (the one-pass form).

iDRO needs ``G_k``, the gradient of each cluster's mean loss ``L_k`` with respect to the parameters of
the top ``grad_layers`` transformer layers (:meth:`zsdr.training.idro.IdroTerm.cluster_grads` takes
one ``autograd.grad`` per cluster present in the batch, each a partial backward pass through those
layers). When each query's loss depends only on its own query, positive and negatives (``pairwise_nll``,
COCO-DR's loss) and nothing else is added to the loss, every row of every layer's input belongs to one
text, every text to one query and every query to one cluster, so the gradient the step's own backward
pass sends to a row is ``s · h_k · ∂L_k/∂row`` for the row's cluster ``k`` alone (``h_k``: the weight of
``L_k`` in the robust loss; ``s``: whatever scales the loss before its backward: gradient accumulation,
fp16 loss scaling). A Linear layer's weight gradient is a sum of per-row products
``Σ_rows g_row x_rowᵀ`` (its bias ``Σ g_row``; a LayerNorm's weight ``Σ g_row ⊙ x̂_row``, bias ``Σ
g_row``): summed within each cluster and divided by ``s · h_k`` (read from the same backward pass at the
cluster losses), they are the per-cluster gradients, with no second backward.

:class:`ClusterGradRecorder` does this with forward hooks on the Linear and LayerNorm modules that own
the selected parameters (a hook saves the module's input and puts a gradient hook on its output), and
holds one ``(present clusters, parameters)`` buffer. The rows of an encoder call belong to queries as
the task says (:meth:`ClusterGradRecorder.rows`: queries one row each, documents ``1 + negatives`` each,
query after query); a call run in chunks of similar lengths
(:func:`zsdr.models.inference.run_in_length_chunks`) names each chunk's rows
(:func:`zsdr.models.inference.chunk_rows`).

:func:`one_pass_unsupported` says why a model or task cannot take the one-pass form (then the
per-cluster ``autograd.grad`` form runs, chosen automatically): a loss whose per-query values depend on
other queries (in-batch negatives), an added loss term, a selected parameter outside a Linear or
LayerNorm module, gradient checkpointing (a hook would see its inputs twice).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch
from torch import nn

# what the one-pass form covers: the modules whose parameter gradients are sums of per-row products
SUPPORTED = (nn.Linear, nn.LayerNorm)


def _owners(backbone: nn.Module, names: set[str]) -> list[tuple[str, nn.Module]]:
    """The modules that directly own a parameter in ``names``, in the backbone's module order."""
    out = []
    for prefix, module in backbone.named_modules():
        own = [f"{prefix}.{n}" if prefix else n for n, _ in module.named_parameters(recurse=False)]
        if any(n in names for n in own):
            out.append((prefix, module))
    return out


def one_pass_unsupported(backbone: nn.Module, param_names: list[str]) -> str | None:
    """Why the selected parameters of ``backbone`` cannot get their cluster gradients from one backward
    pass (``None``: they can)."""
    flag = "is_activation_checkpointing" if hasattr(type(backbone), "is_activation_checkpointing") else \
        "is_gradient_checkpointing"
    if getattr(backbone, flag, False):
        return "the backbone uses gradient checkpointing"
    names = set(param_names)
    for prefix, module in _owners(backbone, names):
        if not isinstance(module, SUPPORTED):
            return f"{prefix or 'the backbone'} is a {type(module).__name__}, not a Linear or LayerNorm module"
    return None


@dataclass
class _Slice:
    """Where one module's parameters sit in the flattened vector of the selected parameters."""

    module: nn.Module
    weight: tuple[int, int] | None = None   # (offset, numel)
    bias: tuple[int, int] | None = None


@dataclass
class _Step:
    """One training forward's recording: the present clusters' slots and the sums the hooks add."""

    slot: torch.Tensor                  # (K,) slot of each cluster, -1 where absent
    present: torch.Tensor               # (m,) the present clusters, ascending
    sums: torch.Tensor                  # (m, P) float32: per present cluster, Σ of its rows' products
    owner: torch.Tensor | None = None   # (rows,) slot of each row of the encoder call being recorded
    pending: int = 0                    # gradient hooks registered and not yet run
    seen: int = 0                       # gradient hooks run
    weights: torch.Tensor | None = None  # (K,) d(backward's loss)/d(L_k), read at the cluster losses
    done: Callable[[], None] | None = None
    handles: list = field(default_factory=list)


class ClusterGradRecorder:
    """Per-cluster gradients of the selected parameters of ``backbone`` from the step's own backward
    pass (see the module docstring). Use per training forward: :meth:`start`, then one :meth:`rows`
    context per encoder call, then :meth:`watch_losses` on the cluster losses, then the backward pass;
    ``on_done`` runs at the end of that backward pass's work on the hooked layers and reads
    :meth:`gradients`."""

    def __init__(self, backbone: nn.Module, param_names: list[str]):
        why = one_pass_unsupported(backbone, param_names)
        if why:
            raise ValueError(f"iDRO one-pass cluster gradients: {why}")
        self.backbone = backbone
        self.param_names = list(param_names)
        params = dict(backbone.named_parameters())
        offsets, at = {}, 0
        for name in self.param_names:  # the order of the flattened vector: the per-cluster form's
            offsets[name] = (at, params[name].numel())
            at += params[name].numel()
        self.width = at
        self.slices: list[_Slice] = []
        names = set(self.param_names)
        for prefix, module in _owners(backbone, names):
            full = {n: f"{prefix}.{n}" if prefix else n for n, _ in module.named_parameters(recurse=False)}
            self.slices.append(_Slice(module, offsets.get(full.get("weight")), offsets.get(full.get("bias"))))
        self.step: _Step | None = None
        self._buffer: torch.Tensor | None = None   # kept between steps: a fresh one costs its page faults

    # ------------------------------------------------------------------------- recording
    def start(self, clusters: torch.Tensor, k: int, device: torch.device) -> None:
        """A training forward begins; ``clusters`` ``(n,)``: the cluster of each query of the batch."""
        if self.step is not None and self.step.pending:
            raise RuntimeError("iDRO: the previous training forward's backward pass did not reach every hooked "
                               "layer (its cluster gradients are incomplete)")
        self.release()
        clusters = clusters.to(device)
        present = torch.unique(clusters)
        slot = torch.full((k,), -1, dtype=torch.long, device=device)
        slot[present] = torch.arange(len(present), device=device)
        self.query_slots = slot[clusters]
        m = len(present)
        if self._buffer is None or self._buffer.shape[0] < m or self._buffer.device != device:
            self._buffer = torch.empty((m, self.width), dtype=torch.float32, device=device)
        sums = self._buffer[:m]
        sums.zero_()
        self.step = _Step(slot, present, sums)

    @contextlib.contextmanager
    def rows(self, rows_per_query: int) -> Iterator[None]:
        """Record the encoder call made inside: its rows are the batch's queries', ``rows_per_query``
        consecutive rows each."""
        step = self.step
        if step is None:
            yield
            return
        step.owner = self.query_slots.repeat_interleave(int(rows_per_query))
        handles = [s.module.register_forward_hook(self._forward_hook(s)) for s in self.slices]
        try:
            yield
        finally:
            for h in handles:
                h.remove()
            step.owner = None

    def watch_losses(self, losses: torch.Tensor, done: Callable[[], None]) -> None:
        """``losses`` ``(K,)``: the cluster losses the robust loss weights; their gradient in the backward
        pass gives each cluster's scale. ``done`` runs once every hooked layer has had its gradient."""
        step = self.step
        step.done = done

        def read(grad: torch.Tensor) -> None:
            step.weights = grad.detach().float()
            self._maybe_done(step)

        step.handles.append(losses.register_hook(read))
        if step.pending == 0:
            raise RuntimeError("iDRO: no hooked layer ran in this training forward (fix: encode the batch inside "
                               "the term's rows() context)")

    def _forward_hook(self, s: _Slice):
        def hook(module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
            step = self.step
            if step is None or step.owner is None or not torch.is_grad_enabled() or not output.requires_grad:
                return
            from zsdr.models.inference import chunk_rows

            owner = step.owner
            chunk = chunk_rows()
            if chunk is not None:
                owner = owner[chunk.to(owner.device)]
            x = inputs[0].detach()
            if x.shape[0] != owner.shape[0]:
                raise RuntimeError(f"iDRO: a hooked layer saw {x.shape[0]} texts where the batch has "
                                   f"{owner.shape[0]} (the rows of an encoder call do not match its queries)")
            if isinstance(module, nn.LayerNorm):  # the normalised input, the LayerNorm weight's factor
                x = nn.functional.layer_norm(x.float(), module.normalized_shape, eps=module.eps)
            step.pending += 1
            output.register_hook(lambda g: self._accumulate(step, s, x, owner, g))
        return hook

    def _accumulate(self, step: _Step, s: _Slice, x: torch.Tensor, owner: torch.Tensor, g: torch.Tensor) -> None:
        with torch.no_grad():
            g = g.detach().float()
            x = x.float()
            b = g.shape[0]
            out = g.shape[-1]
            g_rows = g.reshape(b, -1, out)
            m = step.sums.shape[0]
            if s.bias is not None:
                at, n = s.bias
                step.sums[:, at:at + n].index_add_(0, owner, g_rows.sum(dim=1))
            if s.weight is not None:
                at, n = s.weight
                if isinstance(s.module, nn.LayerNorm):
                    prod = (g_rows * x.reshape(b, -1, out)).sum(dim=1)
                    step.sums[:, at:at + n].index_add_(0, owner, prod)
                else:
                    width = x.shape[-1]
                    x_rows = x.reshape(b, -1, width)
                    counts = torch.bincount(owner, minlength=m).tolist()
                    if sum(c > 0 for c in counts) > 1:  # the texts grouped by cluster
                        order = torch.argsort(owner, stable=True)
                        g_rows, x_rows = g_rows[order], x_rows[order]
                    first = 0
                    for slot, c in enumerate(counts):
                        if c:
                            gs = g_rows[first:first + c].reshape(-1, out)
                            xs = x_rows[first:first + c].reshape(-1, width)
                            step.sums[slot, at:at + n].view(out, width).addmm_(gs.T, xs)
                            first += c
        step.pending -= 1
        step.seen += 1
        self._maybe_done(step)

    def _maybe_done(self, step: _Step) -> None:
        if step.pending == 0 and step.weights is not None and step.done is not None:
            done, step.done = step.done, None
            done()

    # --------------------------------------------------------------------------- results
    def recorded(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(present clusters (m,), their sums (m, P), their scales (m,))`` of the step recorded (this
        process's batch): cluster ``k``'s gradient is its sums over its scale ``s · h_k``. The sums are the
        recorder's buffer, valid until the next :meth:`start`."""
        step = self.step
        return step.present, step.sums, step.weights[step.present]

    def gradients(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(present clusters (m,), their gradients (m, P))`` of the step recorded (a copy)."""
        present, sums, scale = self.recorded()
        return present, sums / scale[:, None]

    def release(self) -> None:
        """Drop the recorded step (its buffer and hooks)."""
        if self.step is not None:
            for h in self.step.handles:
                h.remove()
        self.step = None

"""COCO-DR's implicit distributionally robust optimisation (iDRO), the GroupDRO baseline, and the
query clustering both of them weight.

Provenance: OpenMatch/COCO-DR, ``ANCE/model/dro_loss.py`` (``iDROLoss``, ``DROGreedyLoss``),
``ANCE/drivers/run_ann_data_gen.py`` (``--cluster_query``: faiss K-means of the training queries'
embeddings, ``nredo=5, niter=500``, assignment by L2 to the centroids) and the hyperparameter
table of ``ANCE/README.md`` (``alpha`` 0.25, ``ema`` 0.1, ``rho`` 0.05, ``eps`` 0.01, 50 clusters).
Code names -> ours: ``alpha`` -> ``beta`` (iDRO) / ``fraction`` (GroupDRO), ``ema`` -> ``gamma``
(iDRO's power on the previous weights) / ``ema`` (GroupDRO's loss average), ``h_fun`` -> ``h``.

* :func:`kmeans`, :func:`write_clusters`, :func:`read_clusters`: the query clusters
  (``{"qid", "cluster"}`` JSON lines; the clustering's settings in ``<name>.info.json`` beside).
* :func:`idro_update`: iDRO's weight update, a pure function (see its docstring for the steps).
* :func:`groupdro_update`: the greedy GroupDRO update (Sagawa et al.'s "greedy" variant as the
  official ``DROGreedyLoss`` runs it by default, i.e. without weight EMA).
* :class:`IdroTerm` / :class:`GroupDroTerm`: the robust loss of a bi-encoder batch from its
  per-query losses and query clusters. Both are the recipe's ``dro`` section
  (:class:`DroTerm`, a :class:`~zsdr.training.terms.ReducingTerm`): the bi-encoder task uses the
  one ``dro.kind`` names in place of the mean ``pairwise_nll`` and hands it to the trainer's
  ``attach`` hook, which checkpoints the weights with the model.

Per process, as in the official code: cluster losses and counts are those of the *local* batch;
iDRO's cluster gradients are summed over processes (all-reduce), GroupDRO's running losses and
counts are updated from the losses of the whole global batch (all-gather). iDRO's weights can thus
differ between processes; ``state_dict()`` stores every process's (a collective call, made by the
trainer's checkpointing on every process) so a resumed run continues exactly. The weights move
once per training forward, i.e. once per micro-batch under gradient accumulation (the official
code's behaviour), never under ``torch.no_grad`` or in eval mode. iDRO costs one extra backward
pass through the top ``grad_layers`` layers per cluster present in the batch. The logged
``dro_*`` values describe the weights after the step's update.

Open choices [X]: GroupDRO's worst-group fraction defaults to 0.25, the README's ``alpha`` (the
official scripts pass the one ``--alpha`` to both DRO kinds; no separate GroupDRO value is
documented). Ties between equal running losses sort stably (lower cluster id first); the official
``torch.sort`` is not stable. K-means runs with a fixed number of OpenMP threads (1 by default):
faiss's result depends on it (1 and 2 threads give different centroids on the same data).
"""

from __future__ import annotations

import abc
import contextlib
import json
import logging
import os
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from zsdr.io import DataError, atomic_write
from zsdr.training.sections import section_from_dict
from zsdr.training.terms import Encoded, ReducingTerm, Sampled

DRO_KINDS = ("idro", "groupdro")
# iDRO's cluster gradients: "one_pass" from the training step's own backward pass (zsdr.training.idro_onepass;
# exact where each query's loss depends only on its own texts), "per_cluster" one autograd.grad per present
# cluster (the official code's way, any loss), "auto" the one-pass form wherever it is exact
GRADIENT_FORMS = ("auto", "one_pass", "per_cluster")
log = logging.getLogger(__name__)
CLUSTERS_FIX = "write the file with the query clustering step (zsdr.training.idro.write_clusters)"


# ------------------------------------------------------------------------------------ clusters
def kmeans(embeddings: np.ndarray, k: int, seed: int, niter: int, nredo: int, *,
           threads: int | None = 1) -> tuple[np.ndarray, np.ndarray]:
    """faiss K-means of ``embeddings`` ``(n, d)``: ``(assignments int64 (n,), centroids float32 (k, d))``.
    ``niter`` and ``nredo`` come from config `cocodr.clustering` (its schema holds their defaults).

    ``faiss.Kmeans(d, k, niter, nredo, seed)`` (faiss's defaults otherwise, as the official code:
    at most 256 training points per centroid, sampled with ``seed``), then each embedding's nearest
    centroid by L2. The call runs with ``threads`` OpenMP threads (faiss's setting is restored
    after; ``None`` keeps it), since the result depends on the thread count.
    """
    import faiss

    x = np.ascontiguousarray(np.asarray(embeddings, dtype=np.float32))
    if x.ndim != 2 or x.shape[1] < 1:
        raise ValueError(f"kmeans: expected embeddings of shape (n, d), got {x.shape}")
    n, d = x.shape
    k = int(k)
    if k < 1:
        raise ValueError(f"kmeans: k must be >= 1, got {k}")
    if n < k:
        raise ValueError(f"kmeans: {n} embeddings cannot form {k} clusters "
                         "(fix: lower the number of clusters, dro.clusters, or cluster more queries)")
    if not np.isfinite(x).all():
        raise ValueError("kmeans: the embeddings contain NaN or infinite values "
                         "(fix: check the encoder that made them)")
    previous = faiss.omp_get_max_threads()
    if threads is not None:
        faiss.omp_set_num_threads(int(threads))
    try:
        km = faiss.Kmeans(d, k, niter=int(niter), nredo=int(nredo), seed=int(seed), verbose=False)
        km.train(x)
        _, nearest = km.index.search(x, 1)
    finally:
        faiss.omp_set_num_threads(previous)
    return nearest[:, 0].astype(np.int64), np.array(km.centroids, dtype=np.float32).reshape(k, d)


def clusters_info_path(path: str | os.PathLike) -> Path:
    """Where :func:`write_clusters` puts the clustering's settings: ``clusters.jsonl`` -> ``clusters.info.json``."""
    return Path(path).with_suffix(".info.json")


def write_clusters(path: str | os.PathLike, qids: Sequence[str], assignments: Sequence[int] | np.ndarray,
                   info: dict) -> Path:
    """Write one ``{"qid": ..., "cluster": int}`` line per query (atomically), and ``info`` (the
    clustering's settings: encoder, k, seed, ...) to :func:`clusters_info_path`. Returns ``path``."""
    path = Path(path)
    assignments = np.asarray(assignments)
    if assignments.ndim != 1 or len(qids) != len(assignments):
        raise ValueError(f"write_clusters: {len(qids)} query ids but {assignments.shape} assignments")
    if len(set(map(str, qids))) != len(qids):
        raise ValueError("write_clusters: the query ids are not unique")
    if len(assignments) and (not np.issubdtype(assignments.dtype, np.integer) or assignments.min() < 0):
        raise ValueError("write_clusters: assignments must be integers >= 0")
    with atomic_write(path) as fh:
        for qid, c in zip(qids, assignments.tolist()):
            fh.write(json.dumps({"qid": str(qid), "cluster": int(c)}) + "\n")
    with atomic_write(clusters_info_path(path)) as fh:
        fh.write(json.dumps(info, indent=1, sort_keys=True, default=str) + "\n")
    return path


def read_clusters(path: str | os.PathLike) -> dict[str, int]:
    """``{qid: cluster}`` of a clusters file; a bad line raises :class:`DataError` naming it."""
    from zsdr.data.formats import iter_jsonl

    path = Path(path)
    out: dict[str, int] = {}
    for line, obj in iter_jsonl(path):
        qid, cluster = obj.get("qid"), obj.get("cluster")
        if not isinstance(qid, (str, int)) or isinstance(qid, bool) or str(qid) == "":
            raise DataError(path, line, 'expected a "qid" (string)', CLUSTERS_FIX)
        if not isinstance(cluster, int) or isinstance(cluster, bool) or cluster < 0:
            raise DataError(path, line, f'"cluster" must be an integer >= 0, got {cluster!r}', CLUSTERS_FIX)
        if str(qid) in out:
            raise DataError(path, line, f"query {qid!r} appears twice", CLUSTERS_FIX)
        out[str(qid)] = cluster
    if not out:
        raise DataError(path, None, "no query clusters", CLUSTERS_FIX)
    return out


# -------------------------------------------------------------------------------------- config
@dataclass(kw_only=True)
class DroConfig:
    """The ``dro`` section of a bi-encoder recipe. The keys the config schema gives a default
    (``recipes.<name>.dro`` in schemas/config.schema.yaml: COCO-DR's README, base model) have none here:
    the workflow fills them into every spec, and a spec written by hand gives them."""

    kind: str                           # idro (COCO-DR) | groupdro (the appendix baseline)
    clusters: int                       # K, the number of query clusters (code: n_groups)
    beta: float                         # iDRO: exponent on the cluster losses (code: alpha)
    rho: float                          # iDRO: step size of the weight update
    gamma: float                        # iDRO: power on the previous weights (code: ema)
    eps: float                          # the weight floor (both kinds)
    grad_layers: int                    # iDRO: last transformer layers giving the cluster gradients (3 base, 2 large)
    clusters_file: str | None = None    # {"qid", "cluster"} lines (required; the workflow fills it in)
    fraction: float = 0.25              # GroupDRO: worst-group mass (code: alpha) [X: see the module docstring]
    ema: float = 0.1                    # GroupDRO: running average of the cluster losses and sizes
    gradients: str = "auto"             # iDRO: how the cluster gradients are taken (GRADIENT_FORMS)

    def __post_init__(self):
        if self.kind not in DRO_KINDS:
            raise ValueError(f"dro.kind {self.kind!r}: expected one of {', '.join(DRO_KINDS)}")
        if not self.clusters_file:
            raise ValueError("dro.clusters_file is required: the query clusters written by the clustering step")
        if int(self.clusters) < 1 or int(self.grad_layers) < 1:
            raise ValueError("dro.clusters and dro.grad_layers must be >= 1")
        if self.beta < 0 or self.rho < 0 or self.gamma < 0:
            raise ValueError("dro.beta, dro.rho and dro.gamma must be >= 0")
        if not 0 <= self.eps < 1:
            raise ValueError(f"dro.eps must be in [0, 1), got {self.eps}")
        if not 0 < self.fraction <= 1:
            raise ValueError(f"dro.fraction must be in (0, 1], got {self.fraction}")
        if not 0 <= self.ema <= 1:
            raise ValueError(f"dro.ema must be in [0, 1], got {self.ema}")
        if self.gradients not in GRADIENT_FORMS:
            raise ValueError(f"dro.gradients {self.gradients!r}: expected one of {', '.join(GRADIENT_FORMS)}")
        self.clusters, self.grad_layers = int(self.clusters), int(self.grad_layers)

    @classmethod
    def from_dict(cls, data: dict) -> "DroConfig":
        return section_from_dict(cls, data, "dro")


# ------------------------------------------------------------------------------------- updates
def idro_update(h_prev: torch.Tensor, losses: torch.Tensor, counts: torch.Tensor, grads: torch.Tensor,
                beta: float, rho: float, gamma: float, eps: float) -> torch.Tensor:
    """iDRO's new cluster weights ``(K,)`` (``iDROLoss.forward`` after the robust loss).

    ``h_prev``: the previous weights; ``losses``: each cluster's mean loss in the batch (0 where
    absent); ``counts``: its number of queries; ``grads`` ``(K, P)``: the gradient of each cluster's
    loss (0 rows where absent). With ``m_k = 1[n_k > 0]``:

    1. ``ĝ_k = G_k / (1e-12 + ‖G_k‖)``;
    2. ``R_jk = L_j^β L_k^β ⟨ĝ_j, ĝ_k⟩``, ``a_k = ρ · mean_j R_jk`` (mean over all K rows, absent
       ones included);
    3. ``a_k ← a_k m_k``, then ``a ← a − max(a)`` (an overflow guard that cancels in step 4's normalisation);
    4. ``h_k = h_prev_k^γ · exp(a_k) · m_k``, ``h ← h / Σ h``, ``h ← max(h, ε)``.

    Hence (i) before the floor the present clusters' weights sum to exactly 1 and absent clusters
    have 0; (ii) after it every weight is at least ε: an absent cluster gets exactly ε (its
    previous weight plays no part), which lets it come back (``0^γ`` would stay 0 forever); (iii)
    the weights then sum to 1 plus the mass the floor adds (absent clusters' ε and the raise of
    any present weight below ε): more than 1 whenever a cluster is absent or the floor binds, as
    in the official code (no renormalisation). Losses are clamped at 0 before the power (a
    negative loss would give NaN; the pairwise NLL never is negative, so nothing changes there).
    """
    g = normalised(grads.detach().to(losses.dtype))
    return idro_weights(h_prev, losses, counts, g @ g.T, beta, rho, gamma, eps)


def normalised(grads: torch.Tensor) -> torch.Tensor:
    """Each row over ``1e-12`` plus its L2 norm (step 1 of :func:`idro_update`)."""
    return grads / (1e-12 + torch.linalg.norm(grads, dim=-1, keepdim=True))


def idro_weights(h_prev: torch.Tensor, losses: torch.Tensor, counts: torch.Tensor, cosines: torch.Tensor,
                 beta: float, rho: float, gamma: float, eps: float) -> torch.Tensor:
    """Steps 2-4 of :func:`idro_update` from ``cosines`` ``(K, K)``, the products ``⟨ĝ_j, ĝ_k⟩`` of the
    normalised cluster gradients (0 where a cluster has none)."""
    present = (counts > 0).to(losses.dtype)
    scale = losses.detach().clamp_min(0).pow(beta)
    r = (scale[:, None] * scale[None, :]) * cosines.to(losses.dtype)
    a = rho * r.mean(dim=0) * present
    a = a - a.max()
    h = h_prev.to(losses.dtype).pow(gamma) * torch.exp(a) * present
    h = h / h.sum()
    return h.clamp_min(eps)


def groupdro_update(sum_losses: torch.Tensor, count_cat: torch.Tensor, losses: torch.Tensor, counts: torch.Tensor,
                    fraction: float, ema: float, eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The greedy GroupDRO step: new ``(sum_losses, count_cat, h)``, each ``(K,)``
    (``DROGreedyLoss.forward`` and ``update_mw`` with ``weight_ema=False``).

    ``losses``: each cluster's mean loss in the (global) batch; ``counts``: its number of queries.

    * present clusters: ``sum_losses_k ← (1 − ema) sum_losses_k + ema L_k``; all clusters:
      ``count_cat ← (1 − ema) count_cat + ema n_k``;
    * ``f = count_cat / Σ count_cat``; clusters sorted by ``sum_losses``, highest first (stable);
      ``c`` = how many leading sorted clusters have a cumulative ``f`` below ``fraction`` (K − 1 if all);
    * ``h = ε`` everywhere, ``1 / fraction`` on the first ``c`` sorted clusters, and
      ``max((1 − Σ_{i<c} f_(i) / fraction) / f_(c), ε)`` on the ``c``-th (the one that straddles the mass).
    """
    present = counts > 0
    sum_losses = torch.where(present, sum_losses * (1 - ema) + ema * losses.detach(), sum_losses)
    count_cat = count_cat * (1 - ema) + ema * counts.to(count_cat.dtype)
    frac = count_cat / count_cat.sum()
    order = torch.sort(sum_losses, descending=True, stable=True).indices
    sorted_frac = frac[order]
    cutoff = int((torch.cumsum(sorted_frac, 0) < fraction).sum())
    if cutoff == len(sorted_frac):
        cutoff -= 1
    h = torch.full_like(sum_losses, eps)
    h[order[:cutoff]] = 1.0 / fraction
    leftover = 1.0 - float(sorted_frac[:cutoff].sum()) / fraction
    h[order[cutoff]] = max(leftover / float(sorted_frac[cutoff]), eps)
    return sum_losses, count_cat, h


def cluster_stats(per_query: torch.Tensor, clusters: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(mean loss per cluster (0 where absent), query count per cluster)``, both ``(k,)``; the means
    keep the graph of ``per_query``."""
    zeros = per_query.new_zeros(k)
    sums = zeros.scatter_add(0, clusters, per_query)
    counts = zeros.detach().scatter_add(0, clusters, torch.ones_like(per_query.detach()))
    return sums / (counts + (counts == 0).to(counts.dtype)), counts


def grad_parameters(encoder, grad_layers: int) -> list[tuple[str, torch.nn.Parameter]]:
    """The trainable parameters of the last ``grad_layers`` transformer layers of ``encoder.backbone``
    (names containing ``layer.{i}.``; the official code matches ``layer.9/10/11`` for base models)."""
    backbone = getattr(encoder, "backbone", encoder)
    layers = getattr(getattr(backbone, "config", None), "num_hidden_layers", None)
    if not layers:
        raise ValueError("dro: the backbone's config has no num_hidden_layers; iDRO needs a BERT/RoBERTa-style model")
    keys = [f"layer.{i}." for i in range(max(0, int(layers) - int(grad_layers)), int(layers))]
    picked = [(name, p) for name, p in backbone.named_parameters()
              if p.requires_grad and any(key in name for key in keys)]
    if not picked:
        raise ValueError(f"dro: no trainable backbone parameter is named like {', '.join(keys)} "
                         f"(fix: check dro.grad_layers against the model's {layers} layers and that they train)")
    return picked


def _weight_logs(h: torch.Tensor, present: int) -> dict:
    p = h.detach().float() / h.detach().float().sum()
    entropy = float(-(p * torch.log(p.clamp_min(1e-30))).sum())
    return {"dro_max_weight": float(h.max()), "dro_present_clusters": float(present), "dro_entropy": entropy}


# ---------------------------------------------------------------------------------------- terms
class DroTerm(ReducingTerm):
    """What both DRO terms share: the ``dro`` section, the query clusters (the batch's part:
    ``batch["clusters"]``) and the checkpointed state; :meth:`from_spec` builds the kind the section
    names."""

    name = "dro"
    config_class = DroConfig
    summary = "iDRO / GroupDRO"
    checkpointed = True
    batch_key = "clusters"
    state_names: tuple[str, ...] = ()

    def __init__(self, config: DroConfig):
        self.config = config
        self.clusters = read_clusters(config.clusters_file)
        top = max(self.clusters.values())
        if top >= config.clusters:
            qid = next(q for q, c in self.clusters.items() if c == top)
            raise DataError(config.clusters_file, None, f"query {qid!r} is in cluster {top}, but dro.clusters is "
                            f"{config.clusters}", "set dro.clusters to the number of clusters the file was made with")

    @classmethod
    def from_spec(cls, section: dict, encoder) -> "IdroTerm | GroupDroTerm":
        return build_dro_term(cls.config_from(section), encoder)

    @classmethod
    def input_files(cls, section: dict) -> list[str]:
        return [section["clusters_file"]] if section.get("clusters_file") else []

    def attach(self, train_config, total_steps: int, device: torch.device) -> None:
        """Move the weights (and running statistics) to the training device."""
        for name in self.state_names:
            setattr(self, name, getattr(self, name).to(device))

    def batch_of(self, sampled: Sampled) -> torch.Tensor:
        """The clusters of the batch's queries."""
        return self.cluster_ids(sampled.qids)

    @abc.abstractmethod
    def loss(self, per_query: torch.Tensor, clusters: torch.Tensor, update: bool = True) -> tuple[torch.Tensor, dict]:
        """``(robust loss, logs)`` of per-query losses ``(n,)`` and their clusters ``(n,)``; the weights
        move only with ``update``."""

    def reduce(self, per_query: torch.Tensor, encoded: Encoded, data: torch.Tensor) -> tuple[torch.Tensor, dict]:
        """:meth:`loss` of the step's per-query losses; the weights move only in training forwards
        with gradients (never under ``no_grad`` or in eval mode)."""
        return self.loss(per_query, data, update=encoded.update)

    def cluster_ids(self, qids: Sequence[str]) -> torch.Tensor:
        """The clusters of a batch's queries (``LongTensor``)."""
        missing = [q for q in qids if q not in self.clusters]
        if missing:
            raise DataError(self.config.clusters_file, None,
                            f"query {missing[0]!r} of the training data has no cluster",
                            "re-run the query clustering on the training set this recipe trains on")
        return torch.tensor([self.clusters[q] for q in qids], dtype=torch.long)

    def state_dict(self) -> dict:
        """The state, with every process's copy (a collective: call it on every process)."""
        from zsdr.distributed import gather_objects

        mine = {name: getattr(self, name).detach().cpu().clone() for name in self.state_names}
        return {**mine, "by_rank": gather_objects([mine])}

    def load_state_dict(self, state: dict) -> None:
        import torch.distributed as dist

        from zsdr.distributed import is_distributed

        rank = dist.get_rank() if is_distributed() else 0
        by_rank = state.get("by_rank") or [state]
        mine = by_rank[rank] if rank < len(by_rank) else state
        for name in self.state_names:
            current = getattr(self, name)
            setattr(self, name, mine[name].to(device=current.device, dtype=current.dtype))


class IdroTerm(DroTerm):
    """COCO-DR's iDRO: the batch loss is ``Σ_k h_k L_k`` with the weights ``h`` of the previous step
    (all ones at the first), after which ``h`` moves by :func:`idro_update` (only in training with
    gradients enabled)."""

    state_names = ("h",)

    def __init__(self, config: DroConfig, encoder):
        super().__init__(config)
        if config.kind != "idro":
            raise ValueError(f"IdroTerm needs dro.kind 'idro', got {config.kind!r}")
        self.encoder = encoder
        self.param_names = [name for name, _ in grad_parameters(encoder, config.grad_layers)]
        self.h = torch.ones(config.clusters)
        # the one-pass form needs the task's word that the loss allows it (bind_task); until then per cluster
        self.recorder = None
        self.one_pass_why: str | None = "no task has bound the term"
        self._recording = False

    def bind_task(self, loss, additive: list) -> None:
        """Choose how the cluster gradients are taken (``dro.gradients``): the one-pass form where it is
        exact for ``loss`` with the ``additive`` terms and the model (:mod:`zsdr.training.idro_onepass`),
        else one ``autograd.grad`` per cluster."""
        from zsdr.training.idro_onepass import ClusterGradRecorder, one_pass_unsupported

        backbone = getattr(self.encoder, "backbone", self.encoder)
        why = None
        if not getattr(loss, "separable", False):
            why = f"loss {loss.name}: a query's loss depends on other queries' texts"
        elif additive:
            why = f"the loss adds the {', '.join(t.name for t in additive)} term(s)"
        else:
            why = one_pass_unsupported(backbone, self.param_names)
        if self.config.gradients == "one_pass" and why:
            raise ValueError(f"dro.gradients one_pass is not exact here: {why} (fix: dro.gradients auto or "
                             "per_cluster)")
        if self.config.gradients == "per_cluster":
            why = "dro.gradients per_cluster"
        self.one_pass_why = why
        self.recorder = None if why else ClusterGradRecorder(backbone, self.param_names)
        if self.recorder is not None:  # torch.compile would trace through the hooks (read by compile_backbones)
            backbone.zsdr_eager = "iDRO's one-pass cluster gradients hook its top layers"
        if why:
            log.info("iDRO cluster gradients: one autograd.grad per present cluster (%s)", why)
        else:
            log.info("iDRO cluster gradients: from the step's own backward pass (one pass)")

    def begin(self, data: torch.Tensor | None, update: bool) -> None:
        """A task's forward begins: record the one-pass cluster gradients of a training forward whose
        present clusters all have a positive weight (the backward pass scales a cluster's rows by its
        weight; a zero weight, possible only with ``eps`` 0, takes the per-cluster form this step)."""
        self._recording = False
        if self.recorder is None or not update or data is None:
            return
        clusters = data.to(self.h.device)
        if bool((self.h[torch.unique(clusters)] <= 0).any()):
            self.recorder.release()
            return
        self.recorder.start(clusters, self.config.clusters, self.h.device)
        self._recording = True

    def encoding(self, rows_per_query: int):
        """The context of one encoder call of the batch (``rows_per_query`` texts per query, query after
        query)."""
        if not self._recording:
            return contextlib.nullcontext()
        return self.recorder.rows(rows_per_query)

    def _params(self) -> list[torch.nn.Parameter]:
        wanted = set(self.param_names)
        backbone = getattr(self.encoder, "backbone", self.encoder)
        return [p for name, p in backbone.named_parameters() if name in wanted]

    def cluster_grads(self, losses: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """``(K, P)``: the flattened gradient of each present cluster's loss w.r.t. the selected
        parameters (0 rows for absent clusters), summed over processes; detached."""
        params = self._params()
        width = sum(p.numel() for p in params)
        grads = losses.new_zeros((len(losses), width))
        for k in torch.nonzero(counts > 0).flatten().tolist():
            parts = torch.autograd.grad(losses[k], params, retain_graph=True, allow_unused=True)
            grads[k] = torch.cat([(g if g is not None else torch.zeros_like(p)).reshape(-1).to(grads.dtype)
                                  for g, p in zip(parts, params)])
        from zsdr.distributed import is_distributed

        if is_distributed():
            import torch.distributed as dist

            dist.all_reduce(grads, op=dist.ReduceOp.SUM)
        return grads.detach()

    def loss(self, per_query: torch.Tensor, clusters: torch.Tensor, update: bool = True) -> tuple[torch.Tensor, dict]:
        """``(Σ_k h_prev_k L_k, logs)`` of per-query losses ``(n,)`` and their clusters ``(n,)``. The
        weights move now (per-cluster form), or at the end of the backward pass of the robust loss
        (one-pass form, when :meth:`begin` started a recording: the logs are then 0-d tensors filled in by
        that backward pass)."""
        cfg = self.config
        losses, counts = cluster_stats(per_query.float(), clusters.to(per_query.device), cfg.clusters)
        h_prev = self.h.to(losses.device)
        robust = (losses * h_prev).sum()
        if update and self._recording:
            self._recording = False
            logs = {"dro_max_weight": losses.new_zeros(()), "dro_present_clusters": float((counts > 0).sum()),
                    "dro_entropy": losses.new_zeros(())}
            done = partial(self._one_pass_update, h_prev, losses.detach(), counts, logs)
            self.recorder.watch_losses(losses, done)
            return robust, logs
        if update:
            grads = self.cluster_grads(losses, counts)
            self.h = idro_update(h_prev, losses.detach(), counts, grads, cfg.beta, cfg.rho, cfg.gamma, cfg.eps)
        return robust, _weight_logs(self.h, int((counts > 0).sum()))


    def _one_pass_update(self, h_prev, losses, counts, logs: dict) -> None:
        """The weight update from the recorded cluster gradients; in a multi-process run after the
        backward pass's own collectives (its gradient all-reduce), since this one adds one."""
        from zsdr.distributed import is_distributed

        if is_distributed():
            torch.autograd.Variable._execution_engine.queue_callback(
                partial(self._one_pass_finish, h_prev, losses, counts, logs))
        else:
            self._one_pass_finish(h_prev, losses, counts, logs)

    def _one_pass_finish(self, h_prev, losses, counts, logs: dict) -> None:
        from zsdr.distributed import is_distributed

        cfg = self.config
        present, sums, scale = self.recorder.recorded()
        self.recorder.release()
        with torch.no_grad():
            # ⟨ĝ_j, ĝ_k⟩ with G = sums / scale and ĝ = G / (1e-12 + ‖G‖): sums_j·sums_k over
            # (scale_j 1e-12 + ‖sums_j‖)(scale_k 1e-12 + ‖sums_k‖): one (m, m) product, no pass over G itself
            usable = bool((torch.isfinite(scale) & (scale > 0)).all())
            if is_distributed():  # each process's weights scale its rows: divided out before the sum
                import torch.distributed as dist

                sums = sums / torch.where(scale > 0, scale, torch.ones_like(scale))[:, None]
                mask = torch.zeros(cfg.clusters, device=sums.device)
                mask[present] = 1.0 if usable else float("nan")
                dist.all_reduce(mask, op=dist.ReduceOp.SUM)
                usable = bool(torch.isfinite(mask).all())
                union = torch.nonzero(mask > 0).flatten()
                summed = sums.new_zeros((len(union), sums.shape[1]))
                summed[torch.searchsorted(union, present)] = sums
                dist.all_reduce(summed, op=dist.ReduceOp.SUM)
                present, sums, scale = union, summed, torch.ones(len(union), device=sums.device)
            gram = (sums @ sums.T).to(losses.dtype)
            norms = gram.diagonal().clamp_min(0).sqrt()
            scale = scale.to(losses.dtype)
            denominator = scale * 1e-12 + norms
            cosines = losses.new_zeros((cfg.clusters, cfg.clusters))
            cosines[present[:, None], present[None, :]] = gram / (denominator[:, None] * denominator[None, :])
            h = idro_weights(h_prev, losses, counts, cosines, cfg.beta, cfg.rho, cfg.gamma, cfg.eps)
            if not usable or not bool(torch.isfinite(h).all()):
                log.warning("iDRO: the backward pass gave non-finite cluster gradients (fp16 overflow?); "
                            "the weights stay as they were this step")
                h = h_prev
            self.h = h
            p = h.float() / h.float().sum()
            logs["dro_max_weight"].copy_(h.max())
            logs["dro_entropy"].copy_(-(p * torch.log(p.clamp_min(1e-30))).sum())


class GroupDroTerm(DroTerm):
    """The greedy GroupDRO baseline: the batch loss is ``Σ_k (sum of cluster k's losses) h_k / n``
    with the weights before this step's :func:`groupdro_update` (only in training with gradients
    enabled; the running statistics come from the global batch)."""

    state_names = ("sum_losses", "count_cat", "h")

    def __init__(self, config: DroConfig, encoder=None):
        super().__init__(config)
        if config.kind != "groupdro":
            raise ValueError(f"GroupDroTerm needs dro.kind 'groupdro', got {config.kind!r}")
        k = config.clusters
        self.sum_losses, self.count_cat, self.h = torch.zeros(k), torch.ones(k), torch.ones(k)

    def loss(self, per_query: torch.Tensor, clusters: torch.Tensor, update: bool = True) -> tuple[torch.Tensor, dict]:
        cfg = self.config
        per_query, clusters = per_query.float(), clusters.to(per_query.device)
        sums = per_query.new_zeros(cfg.clusters).scatter_add(0, clusters, per_query)
        robust = (sums * self.h.to(sums.device)).sum() / per_query.shape[0]
        present = int(torch.unique(clusters).numel())
        if update:
            from zsdr.distributed import gather_with_grad

            with torch.no_grad():
                all_losses, all_clusters = gather_with_grad(per_query.detach()), gather_with_grad(clusters)
                losses, counts = cluster_stats(all_losses, all_clusters, cfg.clusters)
                self.sum_losses, self.count_cat, self.h = groupdro_update(
                    self.sum_losses.to(losses.device), self.count_cat.to(losses.device), losses, counts,
                    cfg.fraction, cfg.ema, cfg.eps)
        return robust, _weight_logs(self.h, present)


def build_dro_term(config: DroConfig, encoder) -> IdroTerm | GroupDroTerm:
    """The term a ``dro`` recipe section asks for."""
    return IdroTerm(config, encoder) if config.kind == "idro" else GroupDroTerm(config, encoder)


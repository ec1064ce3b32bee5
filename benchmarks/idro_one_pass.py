"""A COCO-DR training step with and without iDRO: iDRO's cluster gradients per cluster against one pass.

    .venv/bin/python benchmarks/idro_one_pass.py [--device cpu|cuda] [--queries 4] [--present 4] [--steps 3]
        [--rounds 3] [--layers 12] [--hidden 768] [--threads 1]

A randomly initialised BERT-base-shaped model (12 layers, 768 wide, 3,072 intermediate, 30,522 tokens: speed
and equality only, no vocabulary needed) trains COCO-DR's step: ``--queries`` queries (``--query-length``
tokens) each with its positive and ``--negatives`` negatives (``--doc-length`` tokens), CLS pooling, dot
product, pairwise NLL, AdamW, K = 50 clusters, the cluster gradients of the last 3 layers (COCO-DR's
``grad_layers`` for base models). ``--present`` distinct clusters in each batch (default: one per query, as a
batch of distinct queries; a batch built as the official loaders build it, one query per negative, holds
fewer). Three ways, one after the other in each round (alternating keeps the comparison fair on a busy
machine):

* plain: the mean of the per-query losses (COCO-DR without iDRO);
* per_cluster: iDRO with one ``autograd.grad`` per present cluster (the official code's way, ``dro.gradients:
  per_cluster``);
* one_pass: iDRO with the cluster gradients from the step's own backward pass (``dro.gradients: auto``).

It prints the median seconds of a step (forward, backward, weight update, optimizer step) of each way and
the ratios over the plain step; then it trains ``--steps`` steps both iDRO ways from the same weights on the
same batches and prints the largest differences of the cluster weights and of the updated parameters.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

K = 50
term_eps = 0.01   # DroConfig's eps (COCO-DR's README): an absent cluster's weight


def build(args, form: str | None, clusters_file: str, device):
    """A fresh model (same seed every time), its optimiser and the iDRO term (``form`` None: none)."""
    import torch
    from transformers import BertConfig, BertModel

    from zsdr.training.base_losses.pairwise_nll import PairwiseNll
    from zsdr.training.idro import DroConfig, IdroTerm
    from zsdr.workflow import section_defaults

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=30522, hidden_size=args.hidden, num_hidden_layers=args.layers,
                     num_attention_heads=max(1, args.hidden // 64), intermediate_size=4 * args.hidden,
                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    bert = BertModel(cfg, add_pooling_layer=False).to(device)
    opt = torch.optim.AdamW(bert.parameters(), lr=5e-6)
    term = None
    if form is not None:
        term = IdroTerm(DroConfig(**{**section_defaults("recipes.<name>.dro"), "clusters": K, "grad_layers": 3,
                                         "clusters_file": clusters_file, "gradients": form}),
                        SimpleNamespace(backbone=bert))
        term.bind_task(PairwiseNll(), [])
        term.attach(None, 0, device)
    return bert, opt, term


def batches(args, device, count: int):
    """``count`` batches: query ids, document ids, the queries' clusters."""
    import torch

    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(count):
        q = torch.randint(1000, 30000, (args.queries, args.query_length), generator=g)
        d = torch.randint(1000, 30000, (args.queries * (1 + args.negatives), args.doc_length), generator=g)
        present = torch.randperm(K, generator=g)[:args.present]
        clusters = present[torch.arange(args.queries) % args.present].sort().values
        out.append((q.to(device), d.to(device), clusters.to(device)))
    return out


def step(bert, opt, term, batch, negatives: int) -> None:
    import contextlib

    import torch

    from zsdr.losses.contrastive import pairwise_nll

    q_ids, d_ids, clusters = batch
    n, group = q_ids.shape[0], 1 + negatives
    if term is not None:
        term.begin(clusters, True)
    with term.encoding(1) if term is not None else contextlib.nullcontext():
        q = bert(input_ids=q_ids, attention_mask=torch.ones_like(q_ids)).last_hidden_state[:, 0]
    with term.encoding(group) if term is not None else contextlib.nullcontext():
        d = bert(input_ids=d_ids, attention_mask=torch.ones_like(d_ids)).last_hidden_state[:, 0]
    own = torch.einsum("nd,nkd->nk", q, d.view(n, group, -1))
    per_query = pairwise_nll(own[:, 0], own[:, 1:], reduction="none")
    loss = per_query.mean() if term is None else term.loss(per_query, clusters)[0]
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--queries", type=int, default=4)
    ap.add_argument("--present", type=int, default=None, help="distinct clusters a batch (default: --queries)")
    ap.add_argument("--negatives", type=int, default=1)
    ap.add_argument("--query-length", type=int, default=32)
    ap.add_argument("--doc-length", type=int, default=128)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--steps", type=int, default=3, help="timed steps a way and round (after one untimed)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    args.present = min(args.present or args.queries, args.queries, K)
    import torch

    from zsdr.training.idro import write_clusters

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    with tempfile.TemporaryDirectory() as tmp:
        clusters_file = str(Path(tmp) / "clusters.jsonl")
        write_clusters(clusters_file, [f"q{i}" for i in range(K)], list(range(K)), {"k": K})
        data = batches(args, device, args.steps + 1)
        ways = {"plain": None, "per_cluster": "per_cluster", "one_pass": "one_pass"}
        times: dict[str, list[float]] = {w: [] for w in ways}
        for r in range(args.rounds):
            for way, form in ways.items():
                bert, opt, term = build(args, form, clusters_file, device)
                step(bert, opt, term, data[0], args.negatives)   # warm-up, untimed
                sync()
                start = time.perf_counter()
                for b in data[1:]:
                    step(bert, opt, term, b, args.negatives)
                sync()
                times[way].append((time.perf_counter() - start) / args.steps)
                print(f"round {r + 1} {way:>11}: {times[way][-1]:.3f} s a step", flush=True)
                del bert, opt, term
        med = {w: statistics.median(t) for w, t in times.items()}
        print(f"\n{args.layers} layers x {args.hidden}, {args.queries} queries x (1 + {args.negatives}) documents "
              f"({args.query_length} / {args.doc_length} tokens), K = {K}, {args.present} clusters present, "
              f"last 3 layers; {device.type}, {args.threads} thread(s); median of {args.rounds} rounds of "
              f"{args.steps} steps")
        for w in ways:
            print(f"  {w:>11}: {med[w]:.3f} s a step, {med[w] / med['plain']:.2f}x the plain step")
        print(f"  one_pass / per_cluster: {med['one_pass'] / med['per_cluster']:.2f}")

        # equality: both iDRO ways from the same weights on the same batches
        trained = {}
        for form in ("per_cluster", "one_pass"):
            bert, opt, term = build(args, form, clusters_file, device)
            hs = []
            for b in data:
                step(bert, opt, term, b, args.negatives)
                hs.append(term.h.detach().clone())
            trained[form] = hs, {n: p.detach().clone() for n, p in bert.named_parameters()}
            del bert, opt, term
        (h_a, p_a), (h_b, p_b) = trained["per_cluster"], trained["one_pass"]
        dh = max(float((a - b).abs().max()) for a, b in zip(h_a, h_b))
        dp = max(float((p_a[n] - p_b[n]).abs().max()) for n in p_a)
        spread = max(float(h[h > term_eps].max() - h[h > term_eps].min()) for h in h_a)
        print(f"after {len(data)} steps: largest difference of the cluster weights {dh:.2e} (the present clusters' "
              f"weights spread over up to {spread:.2e}), of the updated parameters {dp:.2e}")

if __name__ == "__main__":
    main()

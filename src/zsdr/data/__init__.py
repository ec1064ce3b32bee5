"""Datasets: formats (BEIR, TREC), the registry, downloads, converters, the mini benchmark and the
in-memory BM25 it mines its hard negatives with."""

"""Datasets: formats (BEIR, TREC), the registry, downloads, converters, the mini benchmark."""

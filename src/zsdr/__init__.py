"""zsdr: reproducing zero-shot dense retrieval research, from raw data to paper tables."""

__version__ = "0.1.0"

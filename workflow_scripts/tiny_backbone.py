from pathlib import Path

from zsdr.logs import setup_logging
from zsdr.models.tiny import build_tiny_backbone

setup_logging(snakemake.log[0])
build = dict(snakemake.params.build)
kind, vocab_size = build.pop("kind"), build.pop("vocab_size")
out = Path(snakemake.output[0]).parent
build_tiny_backbone(kind, snakemake.params.datasets, out, build, vocab_size, snakemake.params.seed)

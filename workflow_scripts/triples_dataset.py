from pathlib import Path

from zsdr.data.convert.msmarco import triples_to_beir
from zsdr.logs import setup_logging

setup_logging(snakemake.log[0])
triples_to_beir(snakemake.input.triples, Path(snakemake.output.manifest).parent)

from pathlib import Path

from zsdr.logs import setup_logging
from zsdr.models.released import convert

setup_logging(snakemake.log[0])
convert(snakemake.wildcards.release, snakemake.input.archive, Path(snakemake.output[0]).parent)

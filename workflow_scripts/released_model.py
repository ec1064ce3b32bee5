from pathlib import Path

from zsdr.logs import setup_logging
from zsdr.models.released import convert

setup_logging(snakemake.log[0])
archive = snakemake.input.get("archive") or None  # none: an archive kept in a hub repository
convert(snakemake.wildcards.release, archive, Path(snakemake.output[0]).parent)

from pathlib import Path

from zsdr.data.fetch import convert_configured
from zsdr.logs import setup_logging

setup_logging(snakemake.log[0])
folders = snakemake.params.folders
convert_configured(Path(snakemake.output[0]).parent, folders["downloads"], folders["byo"], snakemake.params.local)

from pathlib import Path

from zsdr.data.fetch import convert_downloaded
from zsdr.logs import setup_logging

setup_logging(snakemake.log[0])
out = Path(snakemake.output[0]).parent
folders = snakemake.params.folders
convert_downloaded(out.name, folders["downloads"], out, byo=folders["byo"])

from pathlib import Path

from zsdr.data.fetch import convert_downloaded
from zsdr.logs import setup_logging

setup_logging(snakemake.log[0])
out = Path(snakemake.output[0]).parent
convert_downloaded(out.name, snakemake.params.downloads, out, byo=snakemake.params.byo)

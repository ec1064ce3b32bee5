from pathlib import Path

from zsdr.data import registry
from zsdr.data.fetch import convert_downloaded
from zsdr.logs import setup_logging

setup_logging(snakemake.log[0])
out = Path(snakemake.output[0]).parent
folders = snakemake.params.folders
# config `datasets.local.<name>`: a local folder (or a new dataset) instead of the registry's downloads
local = snakemake.params.local
dataset = registry.config_dataset(out.name, dict(local)) if local else None
convert_downloaded(out.name, folders["downloads"], out, byo=folders["byo"], dataset=dataset)

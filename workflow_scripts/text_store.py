from pathlib import Path

from zsdr.data.store import build_store
from zsdr.logs import setup_logging

setup_logging(snakemake.log[0])
store = Path(snakemake.output[0]).parent
build_store(store.parent, store)

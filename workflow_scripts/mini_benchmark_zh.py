from pathlib import Path

from zsdr.data.mini import generate
from zsdr.logs import setup_logging

setup_logging(snakemake.log[0])
generate(snakemake.params.mini, Path(snakemake.output.mini).parent, language="zh", described_as="mini-zh.json")

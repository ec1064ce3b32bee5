from zsdr.logs import setup_logging
from zsdr.tables.manifest import write_manifest

setup_logging(snakemake.log[0])
write_manifest(snakemake.input.files, snakemake.output[0])

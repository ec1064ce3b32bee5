from zsdr.logs import setup_logging
from zsdr.regressions.report import gate

setup_logging(snakemake.log[0])
gate(snakemake.input[0], snakemake.output[0])   # a FAIL row fails the job, naming every such row

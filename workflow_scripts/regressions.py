from zsdr.logs import setup_logging
from zsdr.regressions.report import write_report

setup_logging(snakemake.log[0])
out = snakemake.output
write_report(list(snakemake.params.rows), out.csv, out.md, out.figure)

import logging

from zsdr.logs import setup_logging
from zsdr.regressions.report import counts, write_report

setup_logging(snakemake.log[0])
out = snakemake.output
report = write_report(list(snakemake.params.rows), out.csv, out.md, out.figure)
logging.getLogger("zsdr.regressions").info("%s", ", ".join(f"{n} {v}" for v, n in counts(report).items()))

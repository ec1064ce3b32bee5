from zsdr.logs import setup_logging
from zsdr.tables.table1 import write_table1

setup_logging(snakemake.log[0])
p, out = snakemake.params, snakemake.output
write_table1(snakemake.input.metrics, out.csv, out.md, out.figure, systems=p.systems, datasets=p.datasets,
             source=p.source, metric=p.metric, scale=p.scale, significance=p.significance, baselines=p.baselines,
             papers=p.papers)

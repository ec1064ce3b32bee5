from zsdr.logs import setup_logging
from zsdr.tables.cocodr_figures import render_figure4

setup_logging(snakemake.log[0])
p, out = snakemake.params, snakemake.output
render_figure4(p.points, out.figure, out.csv, metric=p.metric, scale=p.scale)

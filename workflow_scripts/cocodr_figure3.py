from zsdr.logs import setup_logging
from zsdr.tables.cocodr_figures import render_figure3

setup_logging(snakemake.log[0])
p, out = snakemake.params, snakemake.output
render_figure3(p.points, out.figure, out.csv, metric=p.metric, reference=p.reference, scale=p.scale)

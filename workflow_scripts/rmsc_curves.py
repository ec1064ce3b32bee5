from zsdr.logs import setup_logging
from zsdr.tables.rmsc_figures import render_curves

setup_logging(snakemake.log[0])
p, out = snakemake.params, snakemake.output
render_curves(p.points, out.figure, out.csv, figure=p.figure, metric=p.metric, scale=p.scale)

from zsdr.logs import setup_logging
from zsdr.tables.cocodr_figures import render_figure5

setup_logging(snakemake.log[0])
p, out = snakemake.params, snakemake.output
render_figure5(p.loss_points, p.geometry_points, p.cluster_points, out.figure, out.csv, scale=p.scale)

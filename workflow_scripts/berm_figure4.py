from zsdr.logs import setup_logging
from zsdr.tables.berm_figures import render_weight_grid

setup_logging(snakemake.log[0])
p = snakemake.params
render_weight_grid(p.points, p.metric, snakemake.output.figure, snakemake.output.csv, scale=p.scale)

from zsdr.logs import setup_logging
from zsdr.tables.figures import FIGURES, render_figure

setup_logging(snakemake.log[0])
p = snakemake.params
render_figure(FIGURES[(p.paper, p.figure)], snakemake.input.table, snakemake.output.figure, scale=p.scale)

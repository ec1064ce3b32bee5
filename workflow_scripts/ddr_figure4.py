from zsdr.logs import setup_logging
from zsdr.tables.ddr_figures import render_dam_curves

setup_logging(snakemake.log[0])
p = snakemake.params
render_dam_curves(p.points, p.dams, p.baseline, p.metric, snakemake.output.figure, snakemake.output.csv,
                  devices=p.devices, labels=p.labels, scale=p.scale)

from zsdr.logs import setup_logging
from zsdr.tables.modir_figures import write_modir_curves

setup_logging(snakemake.log[0])
p, out = snakemake.params, snakemake.output
write_modir_curves(p.points, p.logs, dataset=p.dataset, figure5=p.figure5, table3=p.table3,
                   published=snakemake.input.published, figure3_files=(out.figure3, out.figure3_csv),
                   figure5_files=(out.figure5, out.figure5_csv), table3_files=(out.table3, out.table3_md),
                   scale=p.scale)

from zsdr.logs import setup_logging
from zsdr.tables.modir_figures import render_acc_and_quality, render_domain_acc, write_table3

setup_logging(snakemake.log[0])
p, out = snakemake.params, snakemake.output
render_domain_acc(p.points, p.logs[p.dataset], out.figure3, out.figure3_csv, dataset=p.dataset, scale=p.scale)
render_acc_and_quality(p.points, out.figure5, out.figure5_csv, recipe=p.figure5["recipe"],
                       datasets=p.figure5["datasets"], scale=p.scale)
write_table3(p.points, out.table3, out.table3_md, dataset=p.dataset, settings=p.table3["settings"],
             steps=p.table3["steps"], published=snakemake.input.published, scale=p.scale)

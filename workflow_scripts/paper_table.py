from zsdr.logs import setup_logging
from zsdr.tables.paper_table import write_paper_table

setup_logging(snakemake.log[0])
p, inp = snakemake.params, snakemake.input
write_paper_table(p.paper, p.table, inp.metrics, snakemake.output.csv, snakemake.output.md, scale=p.scale,
                  stats=inp.stats, shift=inp.shift, datasets_override=p.datasets_override,
                  produced_systems=p.produced_systems, available_datasets=p.available_datasets, splits=p.splits,
                  significance=p.significance, rem_files=p.rem_files)

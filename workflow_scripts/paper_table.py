from zsdr.io import read_json
from zsdr.logs import setup_logging
from zsdr.tables.inputs import files_by_dataset, metric_files_by_cell
from zsdr.tables.render import render_table
from zsdr.tables.spec import load_spec

setup_logging(snakemake.log[0])
p = snakemake.params
render_table(load_spec(p.paper, p.table), metric_files_by_cell(snakemake.input.metrics), snakemake.output.csv,
             snakemake.output.md, scale=p.scale, datasets_override=p.datasets_override,
             produced_systems=set(p.produced_systems), available_datasets=p.available_datasets,
             stats=files_by_dataset(snakemake.input.stats), shift=files_by_dataset(snakemake.input.shift),
             splits=p.splits, significance=p.significance,
             rem_stats={k: read_json(f, "save the REM again") for k, f in p.rem_files.items()})

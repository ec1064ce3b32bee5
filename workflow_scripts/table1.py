from zsdr.logs import setup_logging
from zsdr.tables.table1 import build_table1, write_table

setup_logging(snakemake.log[0])
p = snakemake.params
sig = p.significance
df = build_table1(snakemake.input.metrics, p.systems, p.datasets, p.source, p.metric, baselines=p.baselines,
                  test=sig["test"], trials=sig["trials"], holm=sig["holm"], papers=p.papers)
write_table(df, snakemake.output.csv, snakemake.output.md, f"Table 1 ({p.scale} scale): {p.metric}",
            figure=snakemake.output.figure)

from zsdr.devices import claim_for_job
from zsdr.logs import setup_logging
from zsdr.tables.cocodr_figures import cocodr_cluster_analysis

setup_logging(snakemake.log[0])
claim_for_job(snakemake)
p, inp, out = snakemake.params, snakemake.input, snakemake.output
cocodr_cluster_analysis(source=p.source, targets=p.targets, splits=p.splits, with_idro=p.with_idro,
                        without_idro=p.without_idro, metrics=p.metrics, table4_dataset=p.table4_dataset,
                        queries=p.queries, max_source_queries=p.max_source_queries, seed=p.seed, dense=p.dense,
                        scale=p.scale, clusters=inp.clusters, negatives=inp.negatives, published=inp.published,
                        analysis=out.analysis, csv=out.csv, md=out.md)

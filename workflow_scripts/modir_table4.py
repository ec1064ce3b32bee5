from zsdr.devices import claim_for_job
from zsdr.logs import setup_logging
from zsdr.tables.modir_figures import write_case_study

setup_logging(snakemake.log[0])
claim_for_job(snakemake)
p, inp, out = snakemake.params, snakemake.input, snakemake.output
write_case_study(out.csv, out.md, models=p.models, options=p.options, metrics=inp.metrics, source=p.source,
                 target=p.target, split=p.split, neighbours=p.neighbours, max_source_queries=p.max_source_queries,
                 seed=p.seed, device=p.device, batch_size=p.batch_size, published=inp.published, scale=p.scale)

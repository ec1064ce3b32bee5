from zsdr.devices import claim_for_job
from zsdr.evaluation.unit_analysis import write_unit_analysis
from zsdr.logs import setup_logging

setup_logging(snakemake.log[0])
claim_for_job(snakemake)
p = snakemake.params
write_unit_analysis(p.model, p.dataset, snakemake.input.labels, snakemake.output[0], meta=p.meta,
                    batch_size=p.dense["batch_size"], device=p.dense["device"], scale=p.scale, **p.options)

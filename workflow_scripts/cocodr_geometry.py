from zsdr.devices import claim_for_job
from zsdr.evaluation.cocodr import write_span_geometry
from zsdr.logs import setup_logging

setup_logging(snakemake.log[0])
claim_for_job(snakemake)
p = snakemake.params
write_span_geometry(p.model, snakemake.input.spans, snakemake.output[0], docs=p.docs, batch_size=p.batch_size,
                    seed=p.seed, device=p.device)

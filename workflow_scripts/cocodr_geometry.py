import json

from zsdr.devices import claim_for_job
from zsdr.evaluation.cocodr import span_geometry
from zsdr.io import atomic_write
from zsdr.logs import setup_logging

setup_logging(snakemake.log[0])
claim_for_job(snakemake)
p = snakemake.params
stats = span_geometry(p.model, snakemake.input.spans, docs=p.docs, batch_size=p.batch_size, seed=p.seed,
                      device=None if p.device == "auto" else p.device)
with atomic_write(snakemake.output[0]) as fh:
    fh.write(json.dumps({"model": p.model, "spans": snakemake.input.spans, **stats}, indent=1) + "\n")

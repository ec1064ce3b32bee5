import logging

from zsdr.devices import claim_for_job
from zsdr.logs import setup_logging
from zsdr.training.weak.sets import write_weak_set

setup_logging(snakemake.log[0])
claim_for_job(snakemake)
p, out = snakemake.params, snakemake.output
stats = write_weak_set(p.dataset, out.pairs, out.statistics, method=p.method, weak=p.weak, qgen=p.qgen,
                       tokenizer=p.tokenizer, generator=p.generator, seed=p.seed, device=p.device,
                       precision=p.precision, gpus=int(getattr(snakemake.resources, "gpu", 0) or 0),
                       threads=snakemake.threads)
logging.getLogger("weak_pairs").info("%s %s: %s", p.dataset, p.method, stats)

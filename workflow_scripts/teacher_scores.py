from zsdr.devices import claim_for_job
from zsdr.logs import setup_logging
from zsdr.training.teacher import score_pairs

setup_logging(snakemake.log[0])
claim_for_job(snakemake)
p = snakemake.params
score_pairs(p.model, p.dataset, snakemake.input.negatives, snakemake.output[0], batch_size=p.dense["batch_size"],
            max_candidates=p.max_candidates, random_candidates=p.random_candidates, seed=p.seed,
            max_examples=p.max_examples, device=p.dense["device"], precision=p.dense["precision"])

from zsdr.devices import claim_for_job
from zsdr.logs import setup_logging
from zsdr.retrieval.mine import mine_negatives

setup_logging(snakemake.log[0])
claim_for_job(snakemake)
p = snakemake.params
mine_negatives(p.model, p.dataset, snakemake.input.shards, snakemake.output[0], depth=p.mine["depth"],
               sample=p.mine["sample"], seed=p.seed, batch_size=p.mine["batch_size"], device=p.dense["device"],
               precision=p.dense["precision"], max_examples=p.max_examples, **p.options)

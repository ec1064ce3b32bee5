from zsdr.devices import claim_for_job
from zsdr.logs import setup_logging
from zsdr.training.unit_labels import label_shard

setup_logging(snakemake.log[0])
claim_for_job(snakemake)
p, wc = snakemake.params, snakemake.wildcards
# dense.device (auto: CUDA when available) in a job that holds a GPU; a job without one stays on the CPU
device = p.device if getattr(snakemake.resources, "gpu", 0) else "cpu"
label_shard(p.dataset, wc.split, snakemake.input.stats, snakemake.output[0], shard=int(wc.shard),
            shards=int(wc.shards), reader=p.reader, delta=p.labels["delta"], variant=p.labels["variant"],
            k1=p.labels["k1"], b=p.labels["b"], max_pairs=p.max_pairs, seed=p.seed,
            batch_size=p.labels["batch_size"], device=device, precision=p.precision)

from zsdr.devices import claim_for_job
from zsdr.logs import setup_logging
from zsdr.retrieval.encode import encode_corpus_shard

setup_logging(snakemake.log[0])
claim_for_job(snakemake)
p = snakemake.params
d = p.dense
w = snakemake.wildcards
encode_corpus_shard(p.model, p.dataset, snakemake.output[0], shard=int(w.shard), num_shards=int(w.shards),
                    batch_size=d["batch_size"], dtype=d["dtype"], device=d["device"],
                    precision=d["precision"], show_progress=False, donor=p.donor, **p.options)

from zsdr.devices import claim_for_job
from zsdr.logs import setup_logging
from zsdr.retrieval.encode import encode_queries_file

setup_logging(snakemake.log[0])
claim_for_job(snakemake)
p = snakemake.params
d = p.dense
encode_queries_file(p.model, p.dataset, snakemake.wildcards.split, snakemake.output[0], batch_size=d["batch_size"],
                    device=d["device"], precision=d["precision"], **p.options)

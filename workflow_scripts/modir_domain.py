from zsdr.devices import claim_for_job
from zsdr.evaluation.domain import write_domain_analysis
from zsdr.logs import setup_logging

setup_logging(snakemake.log[0])
claim_for_job(snakemake)
p = snakemake.params
a = p.analysis
write_domain_analysis(snakemake.output[0], model=p.model, options=p.options, source=p.source,
                      source_split=a["source_split"], target=p.target, target_split=p.target_split,
                      queries=a["queries"], docs=a["docs"], knn_docs=a["knn_docs"], knn_k=a["knn_k"], seed=p.seed,
                      classifier=a["classifier"], batch_size=p.dense["batch_size"],
                      device=None if p.dense["device"] == "auto" else p.dense["device"])

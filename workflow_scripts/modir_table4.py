from zsdr.devices import claim_for_job
from zsdr.evaluation.case_study import case_study
from zsdr.evaluation.metrics import read_metrics
from zsdr.logs import setup_logging
from zsdr.tables.inputs import metric_scores
from zsdr.tables.modir_figures import write_table4

setup_logging(snakemake.log[0])
claim_for_job(snakemake)
p, inp, out = snakemake.params, snakemake.input, snakemake.output
scores = [metric_scores(read_metrics(path), path, "ndcg@10")[1] for path in inp.metrics]
rows = case_study(p.models[0], p.models[1], p.options[0], p.options[1], p.source, p.target, p.split,
                  scores[0], scores[1], neighbours=p.neighbours, max_source_queries=p.max_source_queries,
                  seed=p.seed, device=None if p.device == "auto" else p.device, batch_size=p.batch_size)
write_table4(out.csv, out.md, rows, published=inp.published, scale=p.scale)

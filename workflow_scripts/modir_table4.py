from zsdr.evaluation.case_study import case_study, write_case_study
from zsdr.logs import setup_logging

setup_logging(snakemake.log[0])
p, inp, out = snakemake.params, snakemake.input, snakemake.output
rows = case_study(p.models[0], p.models[1], p.options[0], p.options[1], p.source, p.target, p.split,
                  inp.metrics[0], inp.metrics[1], neighbours=p.neighbours, max_source_queries=p.max_source_queries,
                  seed=p.seed, device=None if p.device == "auto" else p.device, batch_size=p.batch_size)
write_case_study(out.csv, out.md, rows, published=inp.published, scale=p.scale)

from zsdr.devices import claim_for_job
from zsdr.evaluation.tsne import tsne_map
from zsdr.logs import setup_logging

setup_logging(snakemake.log[0])
claim_for_job(snakemake)
p, out = snakemake.params, snakemake.output
tsne_map(p.models, p.domains, p.points, out.figure, out.csv, out.summary, seed=p.seed,
         title="MoDIR Figure 4: t-SNE of source and target passages over training",
         device=None if p.device == "auto" else p.device, batch_size=p.batch_size, options=p.options)

from zsdr.evaluation.analysis import write_shift_statistics
from zsdr.logs import setup_logging

setup_logging(snakemake.log[0])
p = snakemake.params
write_shift_statistics(p.source, p.target, snakemake.output[0], target=snakemake.wildcards.dataset,
                       source_split=p.source_split, target_split=p.target_split, max_docs=p.max_docs)

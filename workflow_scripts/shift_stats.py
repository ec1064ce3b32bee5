import json

from zsdr.evaluation.analysis import shift_statistics
from zsdr.io import atomic_write
from zsdr.logs import setup_logging

setup_logging(snakemake.log[0])
p = snakemake.params
shift = shift_statistics(p.source, p.target, source_split=p.source_split, target_split=p.target_split,
                         max_docs=p.max_docs)
with atomic_write(snakemake.output[0]) as fh:
    json.dump({"source": p.source, "target": snakemake.wildcards.dataset, **shift}, fh, indent=1)

import json

from zsdr.data.formats import qrels_files
from zsdr.evaluation.analysis import dataset_statistics
from zsdr.io import atomic_write
from zsdr.logs import setup_logging

setup_logging(snakemake.log[0])
p = snakemake.params
stats = {split: dataset_statistics(p.dataset, split=split, doc_fields=p.doc_fields) for split in qrels_files(p.dataset)}
with atomic_write(snakemake.output[0]) as fh:
    json.dump(stats, fh, indent=1)

import logging

from transformers import AutoTokenizer

from zsdr.logs import setup_logging
from zsdr.pretrain.spans import write_spans

setup_logging(snakemake.log[0])
p = snakemake.params
s = p.spans
tokenizer = AutoTokenizer.from_pretrained(p.tokenizer, use_fast=True)
stats = write_spans(p.dataset, snakemake.output[0], tokenizer, max_tokens=s["max_tokens"],
                    new_span_probability=s["new_span_probability"], seed=p.seed, max_docs=s.get("max_docs"))
logging.getLogger("coco_spans").info("%s: %s", p.dataset, stats)

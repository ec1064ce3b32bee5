import logging

from zsdr.logs import setup_logging
from zsdr.pretrain.spans import merge_span_files, write_spans

setup_logging(snakemake.log[0])
log = logging.getLogger("coco_spans")
p = snakemake.params
s = p.spans
if p.parts:  # a corpus in several shards: their span files, in order
    n = merge_span_files(p.parts, snakemake.output[0])
    log.info("%s: %d documents from %d shard span files", p.dataset, n, len(p.parts))
else:
    from transformers import AutoTokenizer

    rows = None
    if "shard" in snakemake.wildcards.keys():
        from zsdr.data.store import open_current, shard_range

        shard, shards = int(snakemake.wildcards.shard), int(snakemake.wildcards.shards)
        rows = shard_range(len(open_current(p.dataset)[0]), shard, shards)
    tokenizer = AutoTokenizer.from_pretrained(p.tokenizer, use_fast=True)
    stats = write_spans(p.dataset, snakemake.output[0], tokenizer, max_tokens=s["max_tokens"],
                        new_span_probability=s["new_span_probability"], seed=p.seed, max_docs=s.get("max_docs"),
                        rows=rows)
    log.info("%s%s: %s", p.dataset, "" if rows is None else f" rows {rows[0]}..{rows[1] - 1}", stats)

from zsdr.logs import setup_logging
from zsdr.pretrain.spans import write_corpus_spans

setup_logging(snakemake.log[0])
p, wc = snakemake.params, snakemake.wildcards
write_corpus_spans(p.dataset, snakemake.output[0], tokenizer=p.tokenizer, spans=p.spans, seed=p.seed, parts=p.parts,
                   shard=(int(wc.shard), int(wc.shards)) if "shard" in wc.keys() else None)

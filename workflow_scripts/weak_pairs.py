import logging

from zsdr.devices import claim_for_job
from zsdr.logs import setup_logging

setup_logging(snakemake.log[0])
claim_for_job(snakemake)
p = snakemake.params
# dense.device (auto: CUDA when available) in a job that holds a GPU; a job without one stays on the CPU
device = p.device if getattr(snakemake.resources, "gpu", 0) else "cpu"
w, q = p.weak, p.qgen
out, statistics = snakemake.output.pairs, snakemake.output.statistics
if p.method == "qgen":   # the only method that runs a model (ICT and SCL need no torch)
    import torch

    from zsdr.models.generator import QueryGenerator
    from zsdr.training.weak.qgen_pairs import write_qgen_pairs

    torch.set_num_threads(max(1, snakemake.threads))
    generator = QueryGenerator.from_pretrained(p.generator).for_inference(device, p.precision)
    stats = write_qgen_pairs(generator, p.dataset, out, queries_per_document=q.get("queries_per_document", 3),
                             max_pairs=w.get("max_pairs"), seed=p.seed, batch_size=q.get("batch_size", 32),
                             top_k=q.get("top_k", 25), top_p=q.get("top_p", 0.95), max_length=q.get("max_length", 64),
                             statistics=statistics)
else:
    from zsdr.training.weak.scl_ict import write_weak_pairs

    tokenizer = None
    if p.method == "scl":   # spans of tokens; ICT splits sentences (no transformers, no torch)
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(p.tokenizer, use_fast=True)
    stats = write_weak_pairs(p.dataset, out, p.method, tokenizer=tokenizer, max_pairs=w.get("max_pairs"),
                             pairs_per_document=w.get("pairs_per_document", 1), seed=p.seed, statistics=statistics,
                             max_tokens=w.get("max_tokens", 30), new_span_probability=w.get("new_span_probability", 0.1),
                             keep_probability=w.get("keep_probability", 0.1))
logging.getLogger("weak_pairs").info("%s %s: %s", p.dataset, p.method, stats)

# Lexical retrieval.


rule bm25_inmemory:
    """BM25 (Lucene formula, k1/b from config) over an in-memory index: small corpora only."""
    input:
        data=lambda wc: dataset_marker(wc.dataset),
        code=code("zsdr.sparse.bm25", "zsdr.sparse.run", "zsdr.data.formats"),
    output:
        f"{RUNS}/{{dataset}}/bm25-inmemory.trec",
    log:
        f"{LOGS}/runs/{{dataset}}/bm25-inmemory.log",
    conda:
        "../envs/cpu.yaml"
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        dataset=lambda wc: f"{DATA}/{wc.dataset}",
        split=lambda wc: eval_split(wc.dataset),
        k1=config["bm25"]["k1"],
        b=config["bm25"]["b"],
        depth=config["bm25"]["depth"],
    script:
        "../workflow_scripts/bm25_inmemory.py"

# Lexical retrieval: Lucene indexes and BM25 / BM25+RM3 runs through pyserini.


rule lucene_index:
    """A Lucene index of a corpus: `flat` (title+text in one field) or `multifield`."""
    input:
        data=lambda wc: PLAN.dataset_marker(wc.dataset),
        code=PLAN.code("zsdr.sparse.lucene", "zsdr.data.formats", script="lucene_index"),
    output:
        directory(f"{INDEXES}/{{dataset}}/lucene-{{fields}}"),
    log:
        f"{LOGS}/indexes/{{dataset}}/lucene-{{fields}}.log",
    wildcard_constraints:
        fields="flat|multifield",
    conda:
        "../envs/java.yaml"
    threads: PLAN.work.index_threads
    resources:
        **PLAN.cluster_resources(),
        mem_mb=8000,
        runtime=PLAN.work.index_runtime,
    params:
        **PLAN.params("lucene_index"),
    script:
        "../workflow_scripts/lucene_index.py"


rule bm25:
    """Top-k BM25 (or BM25+RM3) run of a configured `kind: bm25` system."""
    input:
        data=lambda wc: PLAN.dataset_marker(wc.dataset),
        index=lambda wc: f"{INDEXES}/{wc.dataset}/lucene-{PLAN.job('bm25', wc).fields}",
        code=PLAN.code("zsdr.sparse.lucene", "zsdr.data.formats", script="bm25"),
    output:
        f"{RUNS}/{{dataset}}/{{system}}.trec",
    log:
        f"{LOGS}/runs/{{dataset}}/{{system}}.log",
    wildcard_constraints:
        system=PLAN.alternation(PLAN.systems.bm25),
    conda:
        "../envs/java.yaml"
    threads: PLAN.work.bm25_threads
    resources:
        **PLAN.cluster_resources(),
        mem_mb=8000,
        runtime=PLAN.runtime(120),
    params:
        **PLAN.params("bm25"),
    script:
        "../workflow_scripts/bm25.py"

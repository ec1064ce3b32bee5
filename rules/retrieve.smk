# Dense retrieval: sharded corpus encoding, then exact (faiss) search over the shards.


rule encode_corpus:
    """One shard of a corpus encoded by a dense system, streamed to disk."""
    input:
        data=lambda wc: dataset_marker(wc.dataset),
        model=dense_model_input,
        code=code("zsdr.retrieval.encode", "zsdr.models.encoder", "zsdr.data.formats"),
    output:
        directory(f"{EMBEDDINGS}/{{dataset}}/{{system}}/shard{{shard}}-of-{{shards}}"),
    log:
        f"{LOGS}/embeddings/{{dataset}}/{{system}}/shard{{shard}}-of-{{shards}}.log",
    wildcard_constraints:
        system=alternation(DENSE_SYSTEMS),
        shard=r"\d+",
        shards=r"\d+",
    conda:
        DENSE_ENV
    resources:
        mem_mb=16000,
        runtime=600,
        gpus=config["dense"]["gpus"],
    params:
        model=lambda wc: dense_model(wc.system, wc.dataset),
        dataset=lambda wc: f"{DATA}/{wc.dataset}",
        options=lambda wc: encoder_options(wc.system, wc.dataset),
        dense=config["dense"],
    script:
        "../workflow_scripts/encode_corpus.py"


rule dense_search:
    """Encode the judged queries, search every corpus shard exactly, merge the top-k into a run."""
    input:
        data=lambda wc: dataset_marker(wc.dataset),
        model=dense_model_input,
        shards=lambda wc: [
            f"{EMBEDDINGS}/{wc.dataset}/{wc.system}/{s}" for s in shards(wc.dataset)
        ],
        code=code(
            "zsdr.retrieval",
            "zsdr.models.encoder",
            "zsdr.data.formats",
        ),
    output:
        f"{RUNS}/{{dataset}}/{{system}}.trec",
    log:
        f"{LOGS}/runs/{{dataset}}/{{system}}.log",
    wildcard_constraints:
        system=alternation(DENSE_SYSTEMS),
    conda:
        DENSE_ENV
    resources:
        mem_mb=16000,
        runtime=120,
        gpus=config["dense"]["gpus"],
    params:
        model=lambda wc: dense_model(wc.system, wc.dataset),
        dataset=lambda wc: f"{DATA}/{wc.dataset}",
        split=lambda wc: eval_split(wc.dataset),
        options=lambda wc: encoder_options(wc.system, wc.dataset),
        dense=config["dense"],
    script:
        "../workflow_scripts/dense_search.py"

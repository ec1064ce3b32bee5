# Dense retrieval: sharded corpus encoding, then exact (faiss) search over the shards: in one job, or
# with `cluster.scatter_search` (datasets of > 1 shard) one job per shard and a merge.
#
# On a cluster every dense system's jobs on corpora of one shard form one group job (DENSE_GROUP,
# rules/common.smk). Searches run before new encodes (priority), and the encodes running at once write
# at most the profile's `embeddings_mb` of embeddings, so the temporary embeddings held at once stay bounded.


rule encode_corpus:
    """One shard of a corpus encoded by a dense system, streamed to disk (a shard of several reads its
    rows from the dataset's store; with a `datasets.shared_corpus` donor, the documents both corpora hold
    are read from the donor's embeddings)."""
    input:
        data=PLAN.datasets.shard_corpus,
        model=PLAN.systems.dense_model_input,
        donor=PLAN.evaluation.donor_inputs,
        code=PLAN.code(
            "zsdr.retrieval.encode",
            "zsdr.models.encoder",
            "zsdr.data.formats",
            "zsdr.data.store",
            script="encode_corpus",
        ),
    output:
        temp_unless(
            PLAN.keep_embeddings,
            directory(
                f"{EMBEDDINGS}/{{dataset}}/{{system}}/shard{{shard}}-of-{{shards}}"
            ),
        ),
    log:
        f"{LOGS}/embeddings/{{dataset}}/{{system}}/shard{{shard}}-of-{{shards}}.log",
    wildcard_constraints:
        system=PLAN.alternation(PLAN.systems.dense),
        shard=r"\d+",
        shards=r"\d+",
    group:
        DENSE_GROUP
    conda:
        PLAN.dense_env
    resources:
        **PLAN.cluster_resources(PLAN.resources.dense_gpus),
        mem_mb=16000,
        runtime=PLAN.work.encode_runtime,
        dense_slot=1,
        embeddings_mb=PLAN.work.embeddings_mb,
    params:
        **PLAN.params("encode_corpus"),
    script:
        "../workflow_scripts/encode_corpus.py"


rule encode_queries:
    """The judged queries of a split encoded once by a dense system, for the per-shard searches."""
    input:
        data=lambda wc: PLAN.dataset_marker(wc.dataset),
        model=PLAN.systems.dense_model_input,
        code=PLAN.code(
            "zsdr.retrieval.encode",
            "zsdr.models.encoder",
            "zsdr.data.formats",
            script="encode_queries",
        ),
    output:
        temp_unless(
            PLAN.keep_embeddings,
            directory(f"{EMBEDDINGS}/{{dataset}}/{{system}}/queries-{{split}}"),
        ),
    log:
        f"{LOGS}/embeddings/{{dataset}}/{{system}}/queries-{{split}}.log",
    wildcard_constraints:
        system=PLAN.alternation(PLAN.systems.dense),
        split=r"[\w.-]+",
    priority: 1
    conda:
        PLAN.dense_env
    resources:
        **PLAN.cluster_resources(PLAN.resources.dense_gpus),
        mem_mb=16000,
        runtime=PLAN.work.queries_runtime,
    params:
        **PLAN.params("encode_queries"),
    script:
        "../workflow_scripts/encode_queries.py"


rule search_shard:
    """One corpus shard searched exactly for the encoded queries: its top-k ids and scores (temporary)."""
    input:
        queries=lambda wc: f"{EMBEDDINGS}/{wc.dataset}/{wc.system}/queries-{PLAN.datasets.eval_split(wc.dataset)}",
        shard=f"{EMBEDDINGS}/{{dataset}}/{{system}}/shard{{shard}}-of-{{shards}}",
        code=PLAN.code(
            "zsdr.retrieval",
            "zsdr.models.encoder",
            "zsdr.data.formats",
            script="search_shard",
        ),
    output:
        # removed once the merge (dense_search) has read it
        temp(f"{RUNS}/{{dataset}}/.shards/{{system}}/shard{{shard}}-of-{{shards}}.npz"),
    log:
        f"{LOGS}/runs/{{dataset}}/shards/{{system}}/shard{{shard}}-of-{{shards}}.log",
    wildcard_constraints:
        system=PLAN.alternation(PLAN.systems.dense),
        shard=r"\d+",
        shards=r"\d+",
    priority: 1
    conda:
        PLAN.dense_env
    resources:
        **PLAN.cluster_resources(PLAN.resources.dense_gpus),
        mem_mb=16000,
        runtime=PLAN.work.search_runtime,
    params:
        **PLAN.params("search_shard"),
    script:
        "../workflow_scripts/search_shard.py"


rule dense_search:
    """Encode the judged queries, search every corpus shard exactly, merge the top-k into a run.
    Scattered (`cluster.scatter_search`, > 1 shard): merge the shards' top-k files (a CPU job).
    """
    input:
        data=lambda wc: PLAN.dataset_marker(wc.dataset),
        model=PLAN.systems.dense_model_input,
        shards=PLAN.evaluation.dense_search_inputs,
        code=PLAN.code(
            "zsdr.retrieval",
            "zsdr.models.encoder",
            "zsdr.data.formats",
            script="dense_search",
        ),
    output:
        f"{RUNS}/{{dataset}}/{{system}}.trec",
    log:
        f"{LOGS}/runs/{{dataset}}/{{system}}.log",
    wildcard_constraints:
        system=PLAN.alternation(PLAN.systems.dense),
    priority: 1
    group:
        DENSE_GROUP
    conda:
        PLAN.dense_env
    resources:
        **PLAN.cluster_resources(
            lambda wc: (
                0
                if PLAN.evaluation.scattered(wc.dataset)
                else PLAN.resources.dense_gpus
            )
        ),
        mem_mb=16000,
        runtime=PLAN.work.search_runtime,
        dense_slot=1,
    params:
        **PLAN.params("dense_search"),
    script:
        "../workflow_scripts/dense_search.py"


# Only where at least two evaluation datasets have a single shard (else nothing to group).
if PLAN.evaluation.group_datasets:

    rule dense_search_group:
        """A table-1 dense system on every evaluation dataset of one shard, in one job (`cluster.group_datasets`):
        each corpus encoded (the `encode_corpus` folder), its judged queries encoded and searched (the
        `dense_search` run), one model load for all. Larger corpora keep their per-shard jobs.
        """
        input:
            PLAN.evaluation.group_inputs,
            code=PLAN.code(
                "zsdr.retrieval",
                "zsdr.models.encoder",
                "zsdr.data.formats",
                script="dense_search_group",
            ),
        output:
            [
                temp_unless(
                    PLAN.keep_embeddings,
                    directory(
                        f"{EMBEDDINGS}/{d}/{{system}}/{PLAN.datasets.shards(d)[0]}"
                    ),
                )
                for d in PLAN.evaluation.group_datasets
            ],
            [f"{RUNS}/{d}/{{system}}.trec" for d in PLAN.evaluation.group_datasets],
        log:
            f"{LOGS}/runs/group/{{system}}.log",
        wildcard_constraints:
            system=PLAN.alternation(PLAN.evaluation.group_systems),
        group:
            DENSE_GROUP
        conda:
            PLAN.dense_env
        resources:
            **PLAN.cluster_resources(PLAN.resources.dense_gpus),
            mem_mb=16000,
            runtime=PLAN.work.group_runtime,
            dense_slot=1,
            embeddings_mb=PLAN.work.embeddings_mb,
        params:
            **PLAN.params("dense_search_group"),
        script:
            "../workflow_scripts/dense_search_group.py"

    ruleorder: dense_search_group > dense_search
    ruleorder: dense_search_group > encode_corpus

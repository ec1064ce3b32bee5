# Fine-tuning: training data (triples, BM25 / ANCE negatives, teacher scores), cross-encoders,
# extractive readers and every recipe of config `recipes` through the one trainer (zsdr.training).


rule triples_dataset:
    """Text triples -> a BEIR folder with content-hash ids plus negatives.jsonl (system `triples`)."""
    input:
        triples=lambda wc: PLAN.trainings.side_file(wc.source, "triples", "recipes"),
        code=PLAN.code(
            "zsdr.data.convert",
            "zsdr.data.download",
            "zsdr.data.formats",
            script="triples_dataset",
        ),
    output:
        negatives=f"{DATA}/{{source}}-triples/negatives.jsonl",
        manifest=f"{DATA}/{{source}}-triples/dataset.json",
    log:
        f"{LOGS}/data/triples_{{source}}.log",
    wildcard_constraints:
        source=PLAN.alternation(PLAN.trainings.triples_sources),
    conda:
        "../envs/cpu.yaml"
    resources:
        **PLAN.cluster_resources(),
        mem_mb=16000,
        runtime=PLAN.runtime(240),
    script:
        "../workflow_scripts/triples_dataset.py"


rule bm25_negatives:
    """BM25 negatives mined with the sparse stage (a dataset without triples)."""
    input:
        data=lambda wc: PLAN.dataset_marker(wc.source),
        index=lambda wc: f"{INDEXES}/{wc.source}/lucene-flat",
        code=PLAN.code(
            "zsdr.sparse.lucene", "zsdr.data.formats", script="bm25_negatives"
        ),
    output:
        f"{DATA}/{{source}}/negatives/bm25.jsonl",
    log:
        f"{LOGS}/data/bm25_negatives_{{source}}.log",
    conda:
        "../envs/java.yaml"
    threads: PLAN.work.bm25_threads
    resources:
        **PLAN.cluster_resources(),
        mem_mb=8000,
        runtime=PLAN.runtime(240),
    params:
        **PLAN.params("bm25_negatives"),
    script:
        "../workflow_scripts/bm25_negatives.py"


rule mine_negatives:
    """ANCE refresh: the previous checkpoint retrieves top-k for the training queries at the episode's
    query / document lengths (zsdr.plan.core.MineJob); sample negatives."""
    input:
        data=lambda wc: PLAN.dataset_marker(wc.source),
        model=lambda wc: PLAN.mine_job(wc.run, wc.source).model_files,
        shards=lambda wc: PLAN.mine_job(wc.run, wc.source).shards,
        code=PLAN.code(
            "zsdr.retrieval",
            "zsdr.training.data",
            "zsdr.models.encoder",
            script="mine_negatives",
        ),
    output:
        f"{DATA}/{{source}}/negatives/{{run}}.jsonl",
    log:
        f"{LOGS}/data/mine_{{source}}_{{run}}.log",
    wildcard_constraints:
        run=PLAN.alternation(PLAN.systems.ance_runs),
    priority: 1
    conda:
        PLAN.dense_env
    resources:
        **PLAN.cluster_resources(PLAN.resources.dense_gpus),
        mem_mb=32000,
        runtime=PLAN.runtime(240),
    params:
        **PLAN.params("mine_negatives"),
    script:
        "../workflow_scripts/mine_negatives.py"


rule train_cross_encoder:
    """A cross-encoder (teacher) trained with the one trainer."""
    input:
        lambda wc: PLAN.cross_encoder_job(wc.name).inputs,
        code=PLAN.code(
            *PLAN.TRAINER_CODE,
            "zsdr.losses.contrastive",
            "zsdr.models.cross_encoder",
            script="train",
        ),
    output:
        f"{MODELS}/cross-encoders/{{name}}/config.json",
        f"{MODELS}/cross-encoders/{{name}}/training.json",
    log:
        f"{LOGS}/train/cross-encoder-{{name}}.log",
    wildcard_constraints:
        name=PLAN.alternation(PLAN.recipes.cross_encoders),
    retries: PLAN.resources.training_retries(workflow)
    conda:
        PLAN.dense_env
    threads: lambda wc: PLAN.cross_encoder_job(wc.name).threads
    resources:
        **PLAN.training_request(lambda wc: PLAN.cross_encoder_job(wc.name)),
    params:
        **PLAN.params("train_cross_encoder"),
    message:
        "train cross-encoder {wildcards.name} ({params.shape}): {params.summary}"
    script:
        "../workflow_scripts/train.py"


rule train_reader:
    """An extractive QA reader (the start probabilities of BERM's unit labels), one trainer."""
    input:
        lambda wc: PLAN.reader_job(wc.name).inputs,
        code=PLAN.code(*PLAN.TRAINER_CODE, "zsdr.models.reader", script="train"),
    output:
        f"{MODELS}/readers/{{name}}/config.json",
        f"{MODELS}/readers/{{name}}/training.json",
    log:
        f"{LOGS}/train/reader-{{name}}.log",
    wildcard_constraints:
        name=PLAN.alternation(PLAN.recipes.trained_readers),
    retries: PLAN.resources.training_retries(workflow)
    conda:
        PLAN.dense_env
    threads: lambda wc: PLAN.reader_job(wc.name).threads
    resources:
        **PLAN.training_request(lambda wc: PLAN.reader_job(wc.name)),
    params:
        **PLAN.params("train_reader"),
    message:
        "train reader {wildcards.name} ({params.shape}): {params.summary}"
    script:
        "../workflow_scripts/train.py"


rule teacher_scores:
    """Teacher scores of every (query, candidate) pair of the training negatives (of the queries the
    distilling recipes read: their max_examples)."""
    input:
        model=f"{MODELS}/cross-encoders/{{name}}/config.json",
        data=lambda wc: PLAN.dataset_marker(wc.source),
        store=f"{DATA}/{{source}}/store/store.json",
        negatives=lambda wc: PLAN.trainings.teacher_negatives(wc.name, wc.source),
        code=PLAN.code(
            "zsdr.training.teacher",
            "zsdr.training.data",
            "zsdr.training.tasks",
            "zsdr.models.cross_encoder",
            "zsdr.data.formats",
            script="teacher_scores",
        ),
    output:
        f"{DATA}/{{source}}/teacher/{{name}}.jsonl",
    log:
        f"{LOGS}/data/teacher_{{source}}_{{name}}.log",
    wildcard_constraints:
        name=PLAN.alternation(PLAN.recipes.cross_encoders),
    conda:
        PLAN.dense_env
    resources:
        **PLAN.cluster_resources(PLAN.resources.dense_gpus),
        mem_mb=16000,
        runtime=PLAN.runtime(PLAN.recipes.training["runtime"]),
    params:
        **PLAN.params("teacher_scores"),
    script:
        "../workflow_scripts/teacher_scores.py"


rule train:
    """One training run of a recipe (one ANCE episode, or the whole DPR / KD / DR recipe)."""
    input:
        lambda wc: PLAN.train_job(wc.run).inputs,
        code=lambda wc: PLAN.trainings.recipe_code(wc.run),
    output:
        f"{MODELS}/trained/{{run}}/config.json",
        f"{MODELS}/trained/{{run}}/zsdr.json",
        f"{MODELS}/trained/{{run}}/training.json",
        f"{MODELS}/trained/{{run}}/loss.png",
    log:
        f"{LOGS}/train/{{run}}.log",
    wildcard_constraints:
        run=PLAN.alternation(PLAN.recipes.runs),
    retries: PLAN.resources.training_retries(workflow)
    conda:
        PLAN.dense_env
    threads: lambda wc: PLAN.train_job(wc.run).threads
    resources:
        **PLAN.training_request(lambda wc: PLAN.train_job(wc.run)),
    params:
        **PLAN.params("train"),
    message:
        "train {wildcards.run} ({params.shape}): {params.summary}"
    script:
        "../workflow_scripts/train.py"

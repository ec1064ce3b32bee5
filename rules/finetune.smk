# Fine-tuning: training data (triples, BM25 / ANCE negatives, teacher scores), cross-encoders,
# extractive readers and every recipe of config `recipes` through the one trainer (zsdr.training).


rule triples_dataset:
    """Text triples -> a BEIR folder with content-hash ids plus negatives.jsonl (system `triples`)."""
    input:
        triples=lambda wc: PLAN.side_file(wc.source, "triples", "recipes"),
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
        source=PLAN.alternation(PLAN.TRIPLES_SOURCES),
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
    threads: config["bm25"]["threads"]
    resources:
        **PLAN.cluster_resources(),
        mem_mb=8000,
        runtime=PLAN.runtime(240),
    params:
        dataset=lambda wc: f"{DATA}/{wc.source}",
        depth=PLAN.TRAINING["bm25_negatives"],
        bm25=config["bm25"],
        language=lambda wc: PLAN.language(wc.source),
    script:
        "../workflow_scripts/bm25_negatives.py"


rule mine_negatives:
    """ANCE refresh: the previous checkpoint retrieves top-k for the training queries at the episode's
    query / document lengths (mining_system, mining_options); sample negatives."""
    input:
        data=lambda wc: PLAN.dataset_marker(wc.source),
        model=lambda wc: PLAN.model_files(
            PLAN.dense_model(PLAN.previous_system(wc.run), wc.source)
        ),
        shards=lambda wc: [
            f"{EMBEDDINGS}/{wc.source}/{PLAN.mining_system(wc.run)}/{s}"
            for s in PLAN.shards(wc.source)
        ],
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
        run=PLAN.alternation(PLAN.ANCE_RUNS),
    priority: 1
    conda:
        PLAN.DENSE_ENV
    resources:
        **PLAN.cluster_resources(config["dense"]["gpus"]),
        mem_mb=32000,
        runtime=PLAN.runtime(240),
    params:
        model=lambda wc: PLAN.dense_model(PLAN.previous_system(wc.run), wc.source),
        options=lambda wc: PLAN.mining_options(wc.run, wc.source),
        dataset=lambda wc: f"{DATA}/{wc.source}",
        mine=lambda wc: {
            **PLAN.TRAINING["mine"],
            **PLAN.RECIPES[PLAN.MINED[wc.run][0]].get("mine", {}),
        },
        seed=lambda wc: PLAN.train_settings(PLAN.RECIPES[PLAN.MINED[wc.run][0]])[
            "seed"
        ]
        + PLAN.MINED[wc.run][1],
        max_examples=lambda wc: PLAN.RECIPES[PLAN.MINED[wc.run][0]].get("max_examples"),
        dense=config["dense"],
    script:
        "../workflow_scripts/mine_negatives.py"


rule train_cross_encoder:
    """A cross-encoder (teacher) trained with the one trainer."""
    input:
        lambda wc: PLAN.spec_inputs(PLAN.cross_encoder_spec(wc.name)),
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
        name=PLAN.alternation(PLAN.CROSS_ENCODERS),
    retries: PLAN.training_retries(workflow)
    conda:
        PLAN.DENSE_ENV
    threads: PLAN.training_threads(lambda wc: PLAN.CROSS_ENCODERS[wc.name])
    resources:
        **PLAN.training_resources(lambda wc: PLAN.CROSS_ENCODERS[wc.name]),
        mem_mb=lambda wc: PLAN.training_memory(
            PLAN.cross_encoder_spec(wc.name),
            PLAN.launch_settings(PLAN.CROSS_ENCODERS[wc.name]),
        )[0],
        runtime=PLAN.runtime(PLAN.TRAINING["runtime"]),
    params:
        shape=lambda wc, resources, threads: PLAN.note(
            PLAN.job_shape(resources, threads)
        ),
        spec=lambda wc: PLAN.cross_encoder_spec(wc.name),
        summary=lambda wc: PLAN.note(
            PLAN.spec_summary(
                PLAN.cross_encoder_spec(wc.name),
                PLAN.launch_settings(PLAN.CROSS_ENCODERS[wc.name]),
            )
        ),
        launch=lambda wc: PLAN.launch_settings(PLAN.CROSS_ENCODERS[wc.name]),
    message:
        "train cross-encoder {wildcards.name} ({params.shape}): {params.summary}"
    script:
        "../workflow_scripts/train.py"


rule train_reader:
    """An extractive QA reader (the start probabilities of BERM's unit labels), one trainer."""
    input:
        lambda wc: PLAN.spec_inputs(PLAN.reader_spec(wc.name)),
        code=PLAN.code(*PLAN.TRAINER_CODE, "zsdr.models.reader", script="train"),
    output:
        f"{MODELS}/readers/{{name}}/config.json",
        f"{MODELS}/readers/{{name}}/training.json",
    log:
        f"{LOGS}/train/reader-{{name}}.log",
    wildcard_constraints:
        name=PLAN.alternation(PLAN.TRAINED_READERS),
    retries: PLAN.training_retries(workflow)
    conda:
        PLAN.DENSE_ENV
    threads: PLAN.training_threads(lambda wc: PLAN.READERS[wc.name])
    resources:
        **PLAN.training_resources(lambda wc: PLAN.READERS[wc.name]),
        mem_mb=lambda wc: PLAN.training_memory(
            PLAN.reader_spec(wc.name), PLAN.launch_settings(PLAN.READERS[wc.name])
        )[0],
        runtime=PLAN.runtime(PLAN.TRAINING["runtime"]),
    params:
        shape=lambda wc, resources, threads: PLAN.note(
            PLAN.job_shape(resources, threads)
        ),
        spec=lambda wc: PLAN.reader_spec(wc.name),
        summary=lambda wc: PLAN.note(
            PLAN.spec_summary(
                PLAN.reader_spec(wc.name), PLAN.launch_settings(PLAN.READERS[wc.name])
            )
        ),
        launch=lambda wc: PLAN.launch_settings(PLAN.READERS[wc.name]),
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
        negatives=lambda wc: PLAN.teacher_negatives(wc.name, wc.source),
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
        name=PLAN.alternation(PLAN.CROSS_ENCODERS),
    conda:
        PLAN.DENSE_ENV
    resources:
        **PLAN.cluster_resources(config["dense"]["gpus"]),
        mem_mb=16000,
        runtime=PLAN.runtime(PLAN.TRAINING["runtime"]),
    params:
        model=lambda wc: f"{MODELS}/cross-encoders/{wc.name}",
        dataset=lambda wc: f"{DATA}/{wc.source}",
        max_candidates=lambda wc: PLAN.CROSS_ENCODERS[wc.name].get("max_candidates"),
        random_candidates=lambda wc: PLAN.CROSS_ENCODERS[wc.name].get(
            "random_candidates", 0
        ),
        seed=PLAN.TRAINING["seed"],
        max_examples=lambda wc: PLAN.teacher_max_examples(wc.name, wc.source),
        dense=config["dense"],
    script:
        "../workflow_scripts/teacher_scores.py"


rule train:
    """One training run of a recipe (one ANCE episode, or the whole DPR / KD / DR recipe)."""
    input:
        lambda wc: PLAN.spec_inputs(PLAN.train_spec(wc.run)),
        code=lambda wc: PLAN.recipe_code(wc.run),
    output:
        f"{MODELS}/trained/{{run}}/config.json",
        f"{MODELS}/trained/{{run}}/zsdr.json",
        f"{MODELS}/trained/{{run}}/training.json",
        f"{MODELS}/trained/{{run}}/loss.png",
    log:
        f"{LOGS}/train/{{run}}.log",
    wildcard_constraints:
        run=PLAN.alternation(PLAN.TRAIN_RUNS),
    retries: PLAN.training_retries(workflow)
    conda:
        PLAN.DENSE_ENV
    threads: PLAN.training_threads(lambda wc: PLAN.RECIPES[PLAN.TRAIN_RUNS[wc.run][0]])
    resources:
        **PLAN.training_resources(lambda wc: PLAN.RECIPES[PLAN.TRAIN_RUNS[wc.run][0]]),
        mem_mb=lambda wc: PLAN.training_memory(
            PLAN.train_spec(wc.run),
            PLAN.launch_settings(PLAN.RECIPES[PLAN.TRAIN_RUNS[wc.run][0]]),
        )[0],
        runtime=PLAN.runtime(PLAN.TRAINING["runtime"]),
    params:
        shape=lambda wc, resources, threads: PLAN.note(
            PLAN.job_shape(resources, threads)
        ),
        spec=lambda wc: PLAN.train_spec(wc.run),
        summary=lambda wc: PLAN.note(
            PLAN.spec_summary(
                PLAN.train_spec(wc.run),
                PLAN.launch_settings(PLAN.RECIPES[PLAN.TRAIN_RUNS[wc.run][0]]),
            )
        ),
        launch=lambda wc: PLAN.launch_settings(PLAN.RECIPES[PLAN.TRAIN_RUNS[wc.run][0]]),
    message:
        "train {wildcards.run} ({params.shape}): {params.summary}"
    script:
        "../workflow_scripts/train.py"

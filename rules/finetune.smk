# Fine-tuning: training data (triples, BM25 / ANCE negatives, teacher scores), cross-encoders,
# extractive readers and every recipe of config `recipes` through the one trainer (zsdr.training).


rule triples_dataset:
    """Text triples -> a BEIR folder with content-hash ids plus negatives.jsonl (system `triples`)."""
    input:
        triples=lambda wc: side_file(wc.source, "triples", "recipes"),
        code=code("zsdr.data.convert", "zsdr.data.download", "zsdr.data.formats"),
    output:
        negatives=f"{DATA}/{{source}}-triples/negatives.jsonl",
        manifest=f"{DATA}/{{source}}-triples/dataset.json",
    log:
        f"{LOGS}/data/triples_{{source}}.log",
    wildcard_constraints:
        source=alternation(TRIPLES_SOURCES),
    conda:
        "../envs/cpu.yaml"
    resources:
        **cluster_resources(),
        mem_mb=16000,
        runtime=240,
    script:
        "../workflow_scripts/triples_dataset.py"


rule bm25_negatives:
    """BM25 negatives mined with the sparse stage (a dataset without triples)."""
    input:
        data=lambda wc: dataset_marker(wc.source),
        index=lambda wc: f"{INDEXES}/{wc.source}/lucene-flat",
        code=code("zsdr.sparse.lucene", "zsdr.data.formats"),
    output:
        f"{DATA}/{{source}}/negatives/bm25.jsonl",
    log:
        f"{LOGS}/data/bm25_negatives_{{source}}.log",
    conda:
        "../envs/java.yaml"
    threads: config["bm25"]["threads"]
    resources:
        **cluster_resources(),
        mem_mb=8000,
        runtime=240,
    params:
        dataset=lambda wc: f"{DATA}/{wc.source}",
        depth=TRAINING["bm25_negatives"],
        bm25=config["bm25"],
        language=lambda wc: language(wc.source),
    script:
        "../workflow_scripts/bm25_negatives.py"


rule mine_negatives:
    """ANCE refresh: the previous checkpoint retrieves top-k for the training queries at the episode's
    query / document lengths (mining_system, mining_options); sample negatives."""
    input:
        data=lambda wc: dataset_marker(wc.source),
        model=lambda wc: model_files(dense_model(previous_system(wc.run), wc.source)),
        shards=lambda wc: [
            f"{EMBEDDINGS}/{wc.source}/{mining_system(wc.run)}/{s}"
            for s in shards(wc.source)
        ],
        code=code("zsdr.retrieval", "zsdr.training.data", "zsdr.models.encoder"),
    output:
        f"{DATA}/{{source}}/negatives/{{run}}.jsonl",
    log:
        f"{LOGS}/data/mine_{{source}}_{{run}}.log",
    wildcard_constraints:
        run=alternation(ANCE_RUNS),
    conda:
        DENSE_ENV
    resources:
        **cluster_resources(config["dense"]["gpus"]),
        mem_mb=32000,
        runtime=240,
    params:
        model=lambda wc: dense_model(previous_system(wc.run), wc.source),
        options=lambda wc: mining_options(wc.run, wc.source),
        dataset=lambda wc: f"{DATA}/{wc.source}",
        mine=lambda wc: {
            **TRAINING["mine"],
            **RECIPES[MINED[wc.run][0]].get("mine", {}),
        },
        seed=lambda wc: train_settings(RECIPES[MINED[wc.run][0]])["seed"]
        + MINED[wc.run][1],
        dense=config["dense"],
    script:
        "../workflow_scripts/mine_negatives.py"


rule train_cross_encoder:
    """A cross-encoder (teacher) trained with the one trainer."""
    input:
        lambda wc: spec_inputs(cross_encoder_spec(wc.name)),
        code=code(*TRAINER_CODE, "zsdr.losses.contrastive", "zsdr.models.cross_encoder"),
    output:
        f"{MODELS}/cross-encoders/{{name}}/config.json",
        f"{MODELS}/cross-encoders/{{name}}/training.json",
    log:
        f"{LOGS}/train/cross-encoder-{{name}}.log",
    wildcard_constraints:
        name=alternation(CROSS_ENCODERS),
    conda:
        DENSE_ENV
    threads: TRAINING["threads"]
    resources:
        **cluster_resources(
            lambda wc: launch_gpus(launch_settings(CROSS_ENCODERS[wc.name]))
        ),
        mem_mb=32000,
        runtime=TRAINING["runtime"],
    params:
        spec=lambda wc: cross_encoder_spec(wc.name),
        summary=lambda wc: spec_summary(
            cross_encoder_spec(wc.name), launch_settings(CROSS_ENCODERS[wc.name])
        ),
        launch=lambda wc: launch_settings(CROSS_ENCODERS[wc.name]),
    message:
        "train cross-encoder {wildcards.name} ({resources.gpu} GPU(s)): {params.summary}"
    script:
        "../workflow_scripts/train.py"


rule train_reader:
    """An extractive QA reader (the start probabilities of BERM's unit labels), one trainer."""
    input:
        lambda wc: spec_inputs(reader_spec(wc.name)),
        code=code(*TRAINER_CODE, "zsdr.models.reader"),
    output:
        f"{MODELS}/readers/{{name}}/config.json",
        f"{MODELS}/readers/{{name}}/training.json",
    log:
        f"{LOGS}/train/reader-{{name}}.log",
    wildcard_constraints:
        name=alternation(TRAINED_READERS),
    conda:
        DENSE_ENV
    threads: TRAINING["threads"]
    resources:
        **cluster_resources(lambda wc: launch_gpus(launch_settings(READERS[wc.name]))),
        mem_mb=32000,
        runtime=TRAINING["runtime"],
    params:
        spec=lambda wc: reader_spec(wc.name),
        summary=lambda wc: spec_summary(
            reader_spec(wc.name), launch_settings(READERS[wc.name])
        ),
        launch=lambda wc: launch_settings(READERS[wc.name]),
    message:
        "train reader {wildcards.name} ({resources.gpu} GPU(s)): {params.summary}"
    script:
        "../workflow_scripts/train.py"


rule teacher_scores:
    """Teacher scores of every (query, candidate) pair of the training negatives."""
    input:
        model=f"{MODELS}/cross-encoders/{{name}}/config.json",
        data=lambda wc: dataset_marker(wc.source),
        negatives=lambda wc: training_data(
            CROSS_ENCODERS[wc.name] | {"dataset": wc.source, "negatives": "hard"},
            f"cross_encoders.{wc.name}",
        )[1],
        code=code(
            "zsdr.training.teacher",
            "zsdr.training.data",
            "zsdr.training.tasks",
            "zsdr.models.cross_encoder",
            "zsdr.data.formats",
        ),
    output:
        f"{DATA}/{{source}}/teacher/{{name}}.jsonl",
    log:
        f"{LOGS}/data/teacher_{{source}}_{{name}}.log",
    wildcard_constraints:
        name=alternation(CROSS_ENCODERS),
    conda:
        DENSE_ENV
    resources:
        **cluster_resources(config["dense"]["gpus"]),
        mem_mb=16000,
        runtime=TRAINING["runtime"],
    params:
        model=lambda wc: f"{MODELS}/cross-encoders/{wc.name}",
        dataset=lambda wc: f"{DATA}/{wc.source}",
        max_candidates=lambda wc: CROSS_ENCODERS[wc.name].get("max_candidates"),
        random_candidates=lambda wc: CROSS_ENCODERS[wc.name].get("random_candidates", 0),
        seed=TRAINING["seed"],
        dense=config["dense"],
    script:
        "../workflow_scripts/teacher_scores.py"


rule train:
    """One training run of a recipe (one ANCE episode, or the whole DPR / KD / DR recipe)."""
    input:
        lambda wc: spec_inputs(train_spec(wc.run)),
        code=lambda wc: recipe_code(wc.run),
    output:
        f"{MODELS}/trained/{{run}}/config.json",
        f"{MODELS}/trained/{{run}}/zsdr.json",
        f"{MODELS}/trained/{{run}}/training.json",
        f"{MODELS}/trained/{{run}}/loss.png",
    log:
        f"{LOGS}/train/{{run}}.log",
    wildcard_constraints:
        run=alternation(TRAIN_RUNS),
    conda:
        DENSE_ENV
    threads: TRAINING["threads"]
    resources:
        **cluster_resources(
            lambda wc: launch_gpus(launch_settings(RECIPES[TRAIN_RUNS[wc.run][0]]))
        ),
        mem_mb=32000,
        runtime=TRAINING["runtime"],
    params:
        spec=lambda wc: train_spec(wc.run),
        summary=lambda wc: spec_summary(
            train_spec(wc.run), launch_settings(RECIPES[TRAIN_RUNS[wc.run][0]])
        ),
        launch=lambda wc: launch_settings(RECIPES[TRAIN_RUNS[wc.run][0]]),
    message:
        "train {wildcards.run} ({resources.gpu} GPU(s)): {params.summary}"
    script:
        "../workflow_scripts/train.py"

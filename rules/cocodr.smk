# COCO-DR (docs/methods/cocodr.md): COCO's span files and pretraining, the query clusters of iDRO's ANCE
# episodes, and COCO-DR's figures and case study. The fine-tuning itself is the `train` rule's
# runs of the COCO-DR recipes; the paper tables are rendered by `paper_table`.


rule coco_spans:
    """A corpus's documents as spans of <= max_tokens word pieces (COCO's pretraining examples): one pass
    over the corpus, or, for a corpus in several shards, its shards' span files merged in order.
    """
    input:
        data=lambda wc: PLAN.dataset_marker(wc.corpus),
        tokenizer=PLAN.model_files(PLAN.model_ref(PLAN.COCODR["spans"]["tokenizer"])),
        parts=lambda wc: PLAN.span_parts(wc.corpus),
        code=PLAN.code("zsdr.pretrain.spans", "zsdr.data.formats", script="coco_spans"),
    output:
        f"{DATA}/{{corpus}}/coco/spans.arrow",
    log:
        f"{LOGS}/data/coco_spans_{{corpus}}.log",
    wildcard_constraints:
        corpus=PLAN.alternation(PLAN.SPAN_CORPORA),
    conda:
        "../envs/cpu.yaml"
    resources:
        **PLAN.cluster_resources(),
        mem_mb=16000,
        runtime=PLAN.runtime(240),
    params:
        dataset=lambda wc, input: os.path.dirname(input.data),
        tokenizer=lambda wc, input: (
            os.path.dirname(input.tokenizer[0])
            if input.tokenizer
            else PLAN.model_ref(PLAN.COCODR["spans"]["tokenizer"])
        ),
        parts=lambda wc, input: list(input.parts),
        spans=PLAN.COCODR["spans"],
        seed=config["seed"],
    script:
        "../workflow_scripts/coco_spans.py"


use rule coco_spans as coco_spans_shard with:
    """One shard of a large corpus as spans: its contiguous rows, read from the dataset's store."""
    input:
        data=lambda wc: PLAN.dataset_marker(wc.corpus),
        store=f"{DATA}/{{corpus}}/store/store.json",
        tokenizer=PLAN.model_files(PLAN.model_ref(PLAN.COCODR["spans"]["tokenizer"])),
        parts=[],
        code=PLAN.code(
            "zsdr.pretrain.spans",
            "zsdr.data.formats",
            "zsdr.data.store",
            script="coco_spans",
        ),
    output:
        temp(f"{DATA}/{{corpus}}/coco/spans.{{shard}}-of-{{shards}}.arrow"),
    log:
        f"{LOGS}/data/coco_spans_{{corpus}}_{{shard}}-of-{{shards}}.log",
    wildcard_constraints:
        corpus=PLAN.alternation(PLAN.SPAN_CORPORA),
        shard=r"\d+",
        shards=r"\d+",
    resources:
        **PLAN.cluster_resources(),
        mem_mb=8000,
        runtime=PLAN.runtime(240),


rule pretrain_coco:
    """A retrieval-oriented pretrained backbone: span contrastive + Condenser head MLM + backbone MLM."""
    input:
        lambda wc: PLAN.spec_inputs(PLAN.coco_spec(wc.name)),
        code=PLAN.code(
            *PLAN.TRAINER_CODE, "zsdr.pretrain", "zsdr.losses.coco", script="train"
        ),
    output:
        f"{MODELS}/pretrained/{{name}}/config.json",
        f"{MODELS}/pretrained/{{name}}/training.json",
    log:
        f"{LOGS}/train/pretrained-{{name}}.log",
    wildcard_constraints:
        name=PLAN.alternation(PLAN.TRAINED_PRETRAINED),
    retries: PLAN.training_retries(workflow)
    conda:
        PLAN.DENSE_ENV
    threads: PLAN.training_threads(lambda wc: PLAN.PRETRAINED[wc.name])
    resources:
        **PLAN.training_resources(lambda wc: PLAN.PRETRAINED[wc.name]),
        mem_mb=lambda wc: PLAN.training_memory(
            PLAN.coco_spec(wc.name), PLAN.launch_settings(PLAN.PRETRAINED[wc.name])
        )[0],
        runtime=PLAN.runtime(PLAN.TRAINING["runtime"]),
    params:
        shape=lambda wc, resources, threads: PLAN.note(
            PLAN.job_shape(resources, threads)
        ),
        spec=lambda wc: PLAN.coco_spec(wc.name),
        summary=lambda wc: PLAN.note(
            PLAN.spec_summary(
                PLAN.coco_spec(wc.name), PLAN.launch_settings(PLAN.PRETRAINED[wc.name])
            )
        ),
        launch=lambda wc: PLAN.launch_settings(PLAN.PRETRAINED[wc.name]),
    message:
        "pretrain {wildcards.name} ({params.shape}): {params.summary}"
    script:
        "../workflow_scripts/train.py"


rule cluster_queries:
    """iDRO's groups: K-means over the training queries' embeddings by the model that mines the episode."""
    input:
        data=lambda wc: PLAN.dataset_marker(wc.source),
        model=lambda wc: PLAN.model_files(
            PLAN.dense_model(PLAN.previous_system(wc.run), wc.source)
        ),
        code=PLAN.code(
            "zsdr.training.idro",
            "zsdr.models.encoder",
            "zsdr.data.formats",
            script="cluster_queries",
        ),
    output:
        f"{DATA}/{{source}}/clusters/{{run}}.jsonl",
    log:
        f"{LOGS}/data/clusters_{{source}}_{{run}}.log",
    wildcard_constraints:
        run=PLAN.alternation(PLAN.DRO_RUNS),
    conda:
        PLAN.DENSE_ENV
    resources:
        **PLAN.cluster_resources(config["dense"]["gpus"]),
        mem_mb=16000,
        runtime=PLAN.runtime(120),
    params:
        model=lambda wc: PLAN.dense_model(PLAN.previous_system(wc.run), wc.source),
        options=lambda wc: PLAN.mining_options(wc.run, wc.source),  # the mining's query length
        dataset=lambda wc, input: os.path.dirname(input.data),
        clusters=lambda wc: PLAN.RECIPES[PLAN.TRAIN_RUNS[wc.run][0]]["dro"].get(
            "clusters", 50
        ),
        clustering=PLAN.COCODR["clustering"],
        seed=lambda wc: PLAN.train_settings(PLAN.RECIPES[PLAN.TRAIN_RUNS[wc.run][0]])[
            "seed"
        ]
        + PLAN.TRAIN_RUNS[wc.run][1],
        dense=config["dense"],
    script:
        "../workflow_scripts/cluster_queries.py"


rule cocodr_geometry:
    """COCO loss, alignment and uniformity of one pretrained model's [CLS] on one corpus's spans."""
    input:
        spans=lambda wc: PLAN.spans_file(wc.corpus),
        model=lambda wc: PLAN.model_files(PLAN.cocodr_analysis_model(wc.model)),
        code=PLAN.code(
            "zsdr.pretrain",
            "zsdr.losses.coco",
            "zsdr.evaluation.cocodr",
            script="cocodr_geometry",
        ),
    output:
        f"{STATS}/cocodr/geometry/{{model}}/{{corpus}}.json",
    log:
        f"{LOGS}/stats/cocodr_geometry_{{model}}_{{corpus}}.log",
    wildcard_constraints:
        corpus=PLAN.alternation(PLAN.SPAN_CORPORA),
        model=PLAN.alternation([*PLAN.PRETRAINED, *config["backbones"]]),
    conda:
        PLAN.DENSE_ENV
    resources:
        **PLAN.cluster_resources(config["dense"]["gpus"]),
        mem_mb=8000,
        runtime=PLAN.runtime(60),
    params:
        model=lambda wc: PLAN.cocodr_analysis_model(wc.model),
        docs=PLAN.COCODR_ANALYSIS["docs"],
        batch_size=PLAN.COCODR_ANALYSIS["batch_size"],
        seed=config["seed"],
        device=config["dense"]["device"],
    script:
        "../workflow_scripts/cocodr_geometry.py"


rule cocodr_figure3:
    """COCO-DR Figure 3: average target nDCG@10 against K and against iDRO's update step."""
    input:
        metrics=[f for p in PLAN.cocodr_figure3_points()[0] for f in p["metrics"]],
        reference=(PLAN.cocodr_figure3_points()[1] or {}).get("metrics", []),
        code=PLAN.code(
            "zsdr.tables.cocodr_figures",
            "zsdr.tables.figures",
            script="cocodr_figure3",
        ),
    output:
        figure=report(
            f"{RESULTS}/cocodr/figure3.png",
            caption="../report/paper_figure.rst",
            category="Paper figures",
            subcategory="cocodr",
            labels={"paper": "cocodr", "figure": "3"},
        ),
        csv=f"{RESULTS}/cocodr/figure3.csv",
    log:
        f"{LOGS}/tables/cocodr_figure3.log",
    conda:
        "../envs/cpu.yaml"
    resources:
        **PLAN.cluster_resources(),
        mem_mb=1000,
        runtime=PLAN.runtime(5),
    params:
        points=PLAN.cocodr_figure3_points()[0],
        reference=PLAN.cocodr_figure3_points()[1],
        metric=config["table1"]["metric"],
        scale=config["scale"],
    script:
        "../workflow_scripts/cocodr_figure3.py"


rule cocodr_figure4:
    """COCO-DR Figure 4: nDCG@10 per training episode (warmup, then each ANCE episode) per variant."""
    input:
        metrics=[p["metrics"] for p in PLAN.cocodr_figure4_points()],
        code=PLAN.code(
            "zsdr.tables.cocodr_figures",
            "zsdr.tables.figures",
            script="cocodr_figure4",
        ),
    output:
        figure=report(
            f"{RESULTS}/cocodr/figure4.png",
            caption="../report/paper_figure.rst",
            category="Paper figures",
            subcategory="cocodr",
            labels={"paper": "cocodr", "figure": "4"},
        ),
        csv=f"{RESULTS}/cocodr/figure4.csv",
    log:
        f"{LOGS}/tables/cocodr_figure4.log",
    conda:
        "../envs/cpu.yaml"
    resources:
        **PLAN.cluster_resources(),
        mem_mb=1000,
        runtime=PLAN.runtime(5),
    params:
        points=PLAN.cocodr_figure4_points(),
        metric=config["table1"]["metric"],
        scale=config["scale"],
    script:
        "../workflow_scripts/cocodr_figure4.py"


rule cocodr_clusters:
    """Figure 5c / Table 4: each target's nearest source query cluster and iDRO's effect on it."""
    input:
        source=PLAN.dataset_marker(PLAN.SOURCE),
        targets=[PLAN.dataset_marker(d) for d in PLAN.TARGETS],
        models=lambda wc: [
            f
            for k in ("with_idro", "without_idro")
            for f in PLAN.model_files(
                PLAN.dense_model(PLAN.cocodr_analysis_system(k), PLAN.SOURCE)
            )
        ],
        clusters=lambda wc: f"{DATA}/{PLAN.SOURCE}/clusters/{PLAN.recipe_run(PLAN.cocodr_analysis_system('with_idro'))}.jsonl",
        negatives=lambda wc: PLAN.training_data(
            PLAN.RECIPES[PLAN.cocodr_analysis_system("with_idro")],
            "cocodr.analysis.with_idro",
            PLAN.recipe_run(PLAN.cocodr_analysis_system("with_idro")),
        )[1],
        metrics=lambda wc: [
            f"{METRICS}/{d}/{PLAN.cocodr_analysis_system(k)}.json"
            for d in PLAN.TARGETS
            for k in ("with_idro", "without_idro")
        ],
        published=PLAN.source_file("src/zsdr/tables/published/cocodr_table4.csv"),
        code=PLAN.code(
            "zsdr.evaluation.cocodr",
            "zsdr.training.idro",
            "zsdr.tables.cocodr_figures",
            "zsdr.models.encoder",
            script="cocodr_clusters",
        ),
    output:
        analysis=[f"{STATS}/cocodr/clusters/{d}.json" for d in PLAN.TARGETS],
        csv=f"{RESULTS}/cocodr/table4.csv",
        md=f"{RESULTS}/cocodr/table4.md",
    log:
        f"{LOGS}/stats/cocodr_clusters.log",
    conda:
        PLAN.DENSE_ENV
    resources:
        **PLAN.cluster_resources(config["dense"]["gpus"]),
        mem_mb=16000,
        runtime=PLAN.runtime(120),
    params:
        source=lambda wc, input: os.path.dirname(input.source),
        targets={d: f"{DATA}/{d}" for d in PLAN.TARGETS},
        splits={d: PLAN.eval_split(d) for d in PLAN.TARGETS},
        with_idro=lambda wc: {
            "system": PLAN.cocodr_analysis_system("with_idro"),
            "model": PLAN.dense_model(
                PLAN.cocodr_analysis_system("with_idro"), PLAN.SOURCE
            ),
            "options": PLAN.encoder_options(
                PLAN.cocodr_analysis_system("with_idro"), PLAN.SOURCE
            ),
            "scale": PLAN.system_scale(PLAN.cocodr_analysis_system("with_idro")),
        },
        without_idro=lambda wc: {
            "system": PLAN.cocodr_analysis_system("without_idro"),
            "model": PLAN.dense_model(
                PLAN.cocodr_analysis_system("without_idro"), PLAN.SOURCE
            ),
            "options": PLAN.encoder_options(
                PLAN.cocodr_analysis_system("without_idro"), PLAN.SOURCE
            ),
            "scale": PLAN.system_scale(PLAN.cocodr_analysis_system("without_idro")),
        },
        metrics=lambda wc: {
            d: {
                k: f"{METRICS}/{d}/{PLAN.cocodr_analysis_system(k)}.json"
                for k in ("with_idro", "without_idro")
            }
            for d in PLAN.TARGETS
        },
        table4_dataset=lambda wc: PLAN.check_dataset(
            PLAN.COCODR.get("table4", {}).get("dataset") or PLAN.TARGETS[0]
        ),
        queries=PLAN.COCODR["table4"]["queries"],
        max_source_queries=PLAN.COCODR_ANALYSIS.get("max_source_queries"),
        seed=config["seed"],
        dense=config["dense"],
        scale=config["scale"],
    script:
        "../workflow_scripts/cocodr_clusters.py"


rule cocodr_figure5:
    """COCO-DR Figure 5: (a) COCO loss reduction vs zero-shot gain, (b) alignment vs uniformity,
    (c) iDRO's training-loss gain on the nearest source cluster vs its target gain."""
    input:
        geometry=[
            PLAN.geometry_file(m, d)
            for m in PLAN.COCODR_ANALYSIS["models"]
            for d in PLAN.TARGETS
        ],
        loss=[
            PLAN.geometry_file(PLAN.COCODR_ANALYSIS[k], d)
            for k in ("before", "after")
            for d in PLAN.TARGETS
        ],
        metrics=[
            f"{METRICS}/{d}/{PLAN.cocodr_analysis_system(k)}.json"
            for d in PLAN.TARGETS
            for k in ("with_coco", "without_coco", "with_idro", "without_idro")
        ],
        clusters=[f"{STATS}/cocodr/clusters/{d}.json" for d in PLAN.TARGETS],
        code=PLAN.code(
            "zsdr.tables.cocodr_figures",
            "zsdr.tables.figures",
            script="cocodr_figure5",
        ),
    output:
        figure=report(
            f"{RESULTS}/cocodr/figure5.png",
            caption="../report/paper_figure.rst",
            category="Paper figures",
            subcategory="cocodr",
            labels={"paper": "cocodr", "figure": "5"},
        ),
        csv=f"{RESULTS}/cocodr/figure5.csv",
    log:
        f"{LOGS}/tables/cocodr_figure5.log",
    conda:
        "../envs/cpu.yaml"
    resources:
        **PLAN.cluster_resources(),
        mem_mb=1000,
        runtime=PLAN.runtime(5),
    params:
        loss_points=[
            {
                "dataset": d,
                "before": PLAN.geometry_file(PLAN.COCODR_ANALYSIS["before"], d),
                "after": PLAN.geometry_file(PLAN.COCODR_ANALYSIS["after"], d),
                "with": f"{METRICS}/{d}/{PLAN.cocodr_analysis_system('with_coco')}.json",
                "without": f"{METRICS}/{d}/{PLAN.cocodr_analysis_system('without_coco')}.json",
            }
            for d in PLAN.TARGETS
        ],
        geometry_points=[
            {"label": m, "dataset": d, "stats": PLAN.geometry_file(m, d)}
            for m in PLAN.COCODR_ANALYSIS["models"]
            for d in PLAN.TARGETS
        ],
        cluster_points=[
            {
                "dataset": d,
                "analysis": f"{STATS}/cocodr/clusters/{d}.json",
                "with": f"{METRICS}/{d}/{PLAN.cocodr_analysis_system('with_idro')}.json",
                "without": f"{METRICS}/{d}/{PLAN.cocodr_analysis_system('without_idro')}.json",
            }
            for d in PLAN.TARGETS
        ],
        scale=config["scale"],
    script:
        "../workflow_scripts/cocodr_figure5.py"


ruleorder: cocodr_clusters > paper_table
ruleorder: cocodr_figure3 > cocodr_figure4 > cocodr_figure5 > paper_figure


rule cocodr:
    """Every COCO-DR table and figure (results/cocodr/)."""
    input:
        [f"{RESULTS}/{p}/table{n}.csv" for p, n in PLAN.TABLE_SPECS if p == "cocodr"],
        PLAN.COCODR_FIGURES,

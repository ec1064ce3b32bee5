# COCO-DR (docs/methods/cocodr.md): COCO's span files and pretraining, the query clusters of iDRO's ANCE
# episodes, and COCO-DR's figures and case study. The fine-tuning itself is the `train` rule's
# runs of the COCO-DR recipes; the paper tables are rendered by `paper_table`.


rule coco_spans:
    """A corpus's documents as spans of <= max_tokens word pieces (COCO's pretraining examples): one pass
    over the corpus, or, for a corpus in several shards, its shards' span files merged in order.
    """
    input:
        data=lambda wc: PLAN.dataset_marker(wc.corpus),
        tokenizer=PLAN.refs.model_files(
            PLAN.refs.model_ref(PLAN.cocodr.section["spans"]["tokenizer"])
        ),
        parts=lambda wc: PLAN.cocodr.span_parts(wc.corpus),
        code=PLAN.code(
            "zsdr.pretrain.spans",
            "zsdr.data.formats",
            "zsdr.data.store",
            script="coco_spans",
        ),
    output:
        f"{DATA}/{{corpus}}/coco/spans.arrow",
    log:
        f"{LOGS}/data/coco_spans_{{corpus}}.log",
    wildcard_constraints:
        corpus=PLAN.alternation(PLAN.cocodr.span_corpora),
    conda:
        "../envs/cpu.yaml"
    resources:
        **PLAN.cluster_resources(),
        mem_mb=16000,
        runtime=PLAN.runtime(240),
    params:
        **PLAN.params("coco_spans"),
    script:
        "../workflow_scripts/coco_spans.py"


use rule coco_spans as coco_spans_shard with:
    """One shard of a large corpus as spans: its contiguous rows, read from the dataset's store."""
    input:
        data=lambda wc: PLAN.dataset_marker(wc.corpus),
        store=f"{DATA}/{{corpus}}/store/store.json",
        tokenizer=PLAN.refs.model_files(
            PLAN.refs.model_ref(PLAN.cocodr.section["spans"]["tokenizer"])
        ),
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
        corpus=PLAN.alternation(PLAN.cocodr.span_corpora),
        shard=r"\d+",
        shards=r"\d+",
    resources:
        **PLAN.cluster_resources(),
        mem_mb=8000,
        runtime=PLAN.runtime(240),


rule pretrain_coco:
    """A retrieval-oriented pretrained backbone: span contrastive + Condenser head MLM + backbone MLM."""
    input:
        lambda wc: PLAN.coco_job(wc.name).inputs,
        code=PLAN.code(
            *PLAN.TRAINER_CODE, "zsdr.pretrain", "zsdr.losses.coco", script="train"
        ),
    output:
        f"{MODELS}/pretrained/{{name}}/config.json",
        f"{MODELS}/pretrained/{{name}}/training.json",
    log:
        f"{LOGS}/train/pretrained-{{name}}.log",
    wildcard_constraints:
        name=PLAN.alternation(PLAN.recipes.trained_pretrained),
    retries: PLAN.resources.training_retries(workflow)
    conda:
        PLAN.dense_env
    threads: lambda wc: PLAN.coco_job(wc.name).threads
    resources:
        **PLAN.training_request(lambda wc: PLAN.coco_job(wc.name)),
    params:
        **PLAN.params("pretrain_coco"),
    message:
        "pretrain {wildcards.name} ({params.shape}): {params.summary}"
    script:
        "../workflow_scripts/train.py"


rule cluster_queries:
    """iDRO's groups: K-means over the training queries' embeddings by the model that mines the episode."""
    input:
        data=lambda wc: PLAN.dataset_marker(wc.source),
        model=lambda wc: PLAN.cluster_job(wc.run, wc.source).model_files,
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
        run=PLAN.alternation(PLAN.cocodr.dro_runs),
    conda:
        PLAN.dense_env
    resources:
        **PLAN.cluster_resources(PLAN.resources.dense_gpus),
        mem_mb=16000,
        runtime=PLAN.runtime(120),
    params:
        **PLAN.params("cluster_queries"),
    script:
        "../workflow_scripts/cluster_queries.py"


rule cocodr_geometry:
    """COCO loss, alignment and uniformity of one pretrained model's [CLS] on one corpus's spans."""
    input:
        spans=lambda wc: PLAN.cocodr.spans_file(wc.corpus),
        model=lambda wc: PLAN.refs.model_files(
            PLAN.figures.cocodr_analysis_model(wc.model)
        ),
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
        corpus=PLAN.alternation(PLAN.cocodr.span_corpora),
        model=PLAN.alternation([*PLAN.recipes.pretrained, *PLAN.recipes.backbones]),
    conda:
        PLAN.dense_env
    resources:
        **PLAN.cluster_resources(PLAN.resources.dense_gpus),
        mem_mb=8000,
        runtime=PLAN.runtime(60),
    params:
        **PLAN.params("cocodr_geometry"),
    script:
        "../workflow_scripts/cocodr_geometry.py"


rule cocodr_figure3:
    """COCO-DR Figure 3: average target nDCG@10 against K and against iDRO's update step."""
    input:
        metrics=[
            f for p in PLAN.figures.cocodr_figure3_points()[0] for f in p["metrics"]
        ],
        reference=(PLAN.figures.cocodr_figure3_points()[1] or {}).get("metrics", []),
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
        **PLAN.params("cocodr_figure3"),
    script:
        "../workflow_scripts/cocodr_figure3.py"


rule cocodr_figure4:
    """COCO-DR Figure 4: nDCG@10 per training episode (warmup, then each ANCE episode) per variant."""
    input:
        metrics=[p["metrics"] for p in PLAN.figures.cocodr_figure4_points()],
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
        **PLAN.params("cocodr_figure4"),
    script:
        "../workflow_scripts/cocodr_figure4.py"


rule cocodr_clusters:
    """Figure 5c / Table 4: each target's nearest source query cluster and iDRO's effect on it."""
    input:
        source=PLAN.dataset_marker(PLAN.datasets.source),
        targets=[PLAN.dataset_marker(d) for d in PLAN.datasets.targets],
        models=lambda wc: [
            f
            for side in ("with_idro", "without_idro")
            for f in PLAN.refs.model_files(
                getattr(PLAN.job("cocodr_clusters", wc), side)["model"]
            )
        ],
        clusters=lambda wc: PLAN.figures.cocodr_idro_files()["clusters"],
        negatives=lambda wc: PLAN.figures.cocodr_idro_files()["negatives"],
        metrics=lambda wc: [
            f
            for files in PLAN.job("cocodr_clusters", wc).metrics.values()
            for f in files.values()
        ],
        published=PLAN.code_plan.source_file(
            "src/zsdr/tables/published/cocodr_table4.csv"
        ),
        code=PLAN.code(
            "zsdr.evaluation.cocodr",
            "zsdr.training.idro",
            "zsdr.tables.cocodr_figures",
            "zsdr.models.encoder",
            script="cocodr_clusters",
        ),
    output:
        analysis=[PLAN.cocodr.cluster_analysis_file(d) for d in PLAN.datasets.targets],
        csv=f"{RESULTS}/cocodr/table4.csv",
        md=f"{RESULTS}/cocodr/table4.md",
    log:
        f"{LOGS}/stats/cocodr_clusters.log",
    conda:
        PLAN.dense_env
    resources:
        **PLAN.cluster_resources(PLAN.resources.dense_gpus),
        mem_mb=16000,
        runtime=PLAN.runtime(120),
    params:
        **PLAN.params("cocodr_clusters"),
    script:
        "../workflow_scripts/cocodr_clusters.py"


rule cocodr_figure5:
    """COCO-DR Figure 5: (a) COCO loss reduction vs zero-shot gain, (b) alignment vs uniformity,
    (c) iDRO's training-loss gain on the nearest source cluster vs its target gain."""
    input:
        geometry=[
            PLAN.cocodr.geometry_file(m, d)
            for m in PLAN.cocodr.analysis["models"]
            for d in PLAN.datasets.targets
        ],
        loss=[
            PLAN.cocodr.geometry_file(PLAN.cocodr.analysis[k], d)
            for k in ("before", "after")
            for d in PLAN.datasets.targets
        ],
        metrics=[
            f"{METRICS}/{d}/{PLAN.figures.cocodr_analysis_system(k)}.json"
            for d in PLAN.datasets.targets
            for k in ("with_coco", "without_coco", "with_idro", "without_idro")
        ],
        clusters=[PLAN.cocodr.cluster_analysis_file(d) for d in PLAN.datasets.targets],
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
        **PLAN.params("cocodr_figure5"),
    script:
        "../workflow_scripts/cocodr_figure5.py"


ruleorder: cocodr_clusters > paper_table
ruleorder: cocodr_figure3 > cocodr_figure4 > cocodr_figure5 > paper_figure


rule cocodr:
    """Every COCO-DR table and figure (results/cocodr/)."""
    input:
        [f"{RESULTS}/{p}/table{n}.csv" for p, n in PLAN.tables.specs if p == "cocodr"],
        PLAN.cocodr.figures,

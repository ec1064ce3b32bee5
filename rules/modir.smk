# MoDIR (docs/methods/modir.md): target triples for the adversarial training, the domain analyses of the
# curve runs' snapshots (zsdr.evaluation.domain), and MoDIR's analysis tables and figures. The
# trainings themselves are the `train` rule's runs <recipe>@<target>.


rule modir_triples:
    """A target's unlabelled triples (query, document, document) for MoDIR's domain classifier."""
    input:
        data=lambda wc: PLAN.dataset_marker(wc.dataset),
        store=f"{DATA}/{{dataset}}/store/store.json",
        code=PLAN.code(
            "zsdr.training.modir", "zsdr.data.formats", script="modir_triples"
        ),
    output:
        f"{DATA}/{{dataset}}/modir/triples.tsv",
    log:
        f"{LOGS}/data/modir_triples_{{dataset}}.log",
    wildcard_constraints:
        dataset=PLAN.alternation(PLAN.recipes.per_target_datasets),
    conda:
        "../envs/cpu.yaml"
    resources:
        **PLAN.cluster_resources(),
        mem_mb=16000,
        runtime=PLAN.runtime(60),
    params:
        **PLAN.params("modir_triples"),
    script:
        "../workflow_scripts/modir_triples.py"


rule modir_domain:
    """Global Domain-Acc (queries, documents) and KNN-Source% of one system between the source and a target."""
    input:
        model=PLAN.systems.dense_model_input,
        source=PLAN.dataset_marker(PLAN.datasets.source),
        target=lambda wc: PLAN.dataset_marker(wc.dataset),
        code=PLAN.code(
            "zsdr.evaluation.domain",
            "zsdr.models.encoder",
            "zsdr.data.formats",
            script="modir_domain",
        ),
    output:
        f"{STATS}/modir/{{dataset}}/{{system}}.json",
    log:
        f"{LOGS}/stats/modir_{{dataset}}_{{system}}.log",
    wildcard_constraints:
        dataset=PLAN.alternation(PLAN.modir.curve_datasets),
        system=PLAN.alternation(set(PLAN.systems.modir_step_systems.values())),
    conda:
        PLAN.dense_env
    resources:
        **PLAN.cluster_resources(PLAN.resources.dense_gpus),
        mem_mb=16000,
        runtime=PLAN.runtime(120),
    params:
        **PLAN.params("modir_domain"),
    script:
        "../workflow_scripts/modir_domain.py"


ruleorder: modir_curves > modir_table4 > paper_table


rule modir_curves:
    """MoDIR Figures 3 and 5 and Table 3: Domain-Acc, KNN-Source% and nDCG@10 over training."""
    input:
        domain=[p["domain"] for p in PLAN.figures.modir_points()],
        metrics=[p["metrics"] for p in PLAN.figures.modir_points()],
        runs=[
            f"{MODELS}/trained/{r}@{d}/training.json"
            for d, logs in PLAN.modir.modir_logs().items()
            for r in logs
        ],
        published=PLAN.code_plan.source_file(
            "src/zsdr/tables/published/modir_table3.csv"
        ),
        code=PLAN.code(
            "zsdr.tables.modir_figures",
            "zsdr.tables.figures",
            "zsdr.tables.inputs",
            "zsdr.tables.spec",
            script="modir_curves",
        ),
    output:
        figure3=report(
            f"{RESULTS}/modir/figure3.png",
            caption="../report/paper_figure.rst",
            category="Paper figures",
            subcategory="modir",
            labels={"paper": "modir", "figure": "3"},
        ),
        figure3_csv=f"{RESULTS}/modir/figure3.csv",
        figure5=report(
            f"{RESULTS}/modir/figure5.png",
            caption="../report/paper_figure.rst",
            category="Paper figures",
            subcategory="modir",
            labels={"paper": "modir", "figure": "5"},
        ),
        figure5_csv=f"{RESULTS}/modir/figure5.csv",
        table3=f"{RESULTS}/modir/table3.csv",
        table3_md=f"{RESULTS}/modir/table3.md",
    log:
        f"{LOGS}/tables/modir_curves.log",
    conda:
        "../envs/cpu.yaml"
    resources:
        **PLAN.cluster_resources(),
        mem_mb=2000,
        runtime=PLAN.runtime(10),
    params:
        **PLAN.params("modir_curves"),
    script:
        "../workflow_scripts/modir_curves.py"


rule modir_figure4:
    """MoDIR Figure 4: t-SNE of source and target passages after 0 / ... steps, with and without momentum."""
    input:
        models=[
            f
            for m in PLAN.figures.modir_tsne_models().values()
            for f in PLAN.refs.model_files(m)
        ],
        data=[
            PLAN.dataset_marker(PLAN.datasets.source),
            PLAN.dataset_marker(PLAN.modir.modir_dataset("figure4")),
        ],
        code=PLAN.code(
            "zsdr.evaluation.tsne",
            "zsdr.models.encoder",
            "zsdr.tables.figures",
            script="modir_figure4",
        ),
    output:
        figure=report(
            f"{RESULTS}/modir/figure4.png",
            caption="../report/paper_figure.rst",
            category="Paper figures",
            subcategory="modir",
            labels={"paper": "modir", "figure": "4"},
        ),
        csv=f"{RESULTS}/modir/figure4.csv",
        summary=f"{RESULTS}/modir/figure4.json",
    log:
        f"{LOGS}/tables/modir_figure4.log",
    conda:
        PLAN.dense_env
    resources:
        **PLAN.cluster_resources(PLAN.resources.dense_gpus),
        mem_mb=8000,
        runtime=PLAN.runtime(60),
    params:
        **PLAN.params("modir_figure4"),
    script:
        "../workflow_scripts/modir_figure4.py"


rule modir_table4:
    """MoDIR Table 4: nearest source training queries of the most helped and most hurt target queries."""
    input:
        models=[
            f
            for s in PLAN.modir.modir_case()
            for f in PLAN.refs.model_files(
                PLAN.systems.dense_model(s, PLAN.modir.modir_dataset("table4"))
            )
        ],
        metrics=[
            f"{METRICS}/{PLAN.modir.modir_dataset('table4')}/{s}.json"
            for s in PLAN.modir.modir_case()
        ],
        source=PLAN.dataset_marker(PLAN.datasets.source),
        target=PLAN.dataset_marker(PLAN.modir.modir_dataset("table4")),
        published=PLAN.code_plan.source_file(
            "src/zsdr/tables/published/modir_table4.csv"
        ),
        code=PLAN.code(
            "zsdr.evaluation.case_study",
            "zsdr.models.encoder",
            "zsdr.tables.inputs",
            "zsdr.tables.modir_figures",
            script="modir_table4",
        ),
    output:
        csv=f"{RESULTS}/modir/table4.csv",
        md=f"{RESULTS}/modir/table4.md",
    log:
        f"{LOGS}/tables/modir_table4.log",
    conda:
        PLAN.dense_env
    resources:
        **PLAN.cluster_resources(PLAN.resources.dense_gpus),
        mem_mb=8000,
        runtime=PLAN.runtime(60),
    params:
        **PLAN.params("modir_table4"),
    script:
        "../workflow_scripts/modir_table4.py"


rule modir:
    """Every MoDIR table and figure (results/modir/)."""
    input:
        [f"{RESULTS}/{p}/table{n}.csv" for p, n in PLAN.tables.specs if p == "modir"],
        PLAN.modir.figures,

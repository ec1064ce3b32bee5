# RMSC (docs/methods/rmsc.md): weak-supervision pairs per corpus (SCL, ICT, QGen), the QGen generator,
# and RMSC's learning-curve figures. The joint training itself is the `train` rule's runs of the
# `mixture` recipes; RMSC's Tables 1-2 are rendered by `paper_table`.


rule build_generator:
    """A randomly initialised tiny T5 query generator over a tiny backbone's tokenizer."""
    input:
        tokenizer=lambda wc: PLAN.model_files(
            PLAN.model_ref(PLAN.GENERATORS[wc.name]["tokenizer"])
        ),
        code=PLAN.code("zsdr.models.generator", script="build_generator"),
    output:
        f"{MODELS}/generators/{{name}}.init/config.json",
    log:
        f"{LOGS}/train/generator-{{name}}-build.log",
    wildcard_constraints:
        name=PLAN.alternation(PLAN.TRAINED_GENERATORS),
    conda:
        "../envs/cpu.yaml"
    resources:
        **PLAN.cluster_resources(),
        mem_mb=4000,
        runtime=PLAN.runtime(10),
    params:
        tokenizer=lambda wc, input: os.path.dirname(input.tokenizer[0]),
        size=lambda wc: PLAN.GENERATORS[wc.name]["build"],
        seed=config["seed"],
    script:
        "../workflow_scripts/build_generator.py"


rule train_generator:
    """QGen's generator trained on the source's training pairs (passage -> query), one trainer."""
    input:
        lambda wc: PLAN.spec_inputs(PLAN.generator_spec(wc.name)),
        code=PLAN.code(
            *PLAN.TRAINER_CODE,
            "zsdr.models.generator",
            "zsdr.training.qgen",
            script="train",
        ),
    output:
        f"{MODELS}/generators/{{name}}/config.json",
        f"{MODELS}/generators/{{name}}/training.json",
    log:
        f"{LOGS}/train/generator-{{name}}.log",
    wildcard_constraints:
        name=PLAN.alternation(PLAN.TRAINED_GENERATORS),
    retries: PLAN.training_retries(workflow)
    conda:
        PLAN.DENSE_ENV
    threads: PLAN.training_threads(lambda wc: PLAN.GENERATORS[wc.name])
    resources:
        **PLAN.training_resources(lambda wc: PLAN.GENERATORS[wc.name]),
        mem_mb=lambda wc: PLAN.training_memory(
            PLAN.generator_spec(wc.name),
            PLAN.launch_settings(PLAN.GENERATORS[wc.name]),
        )[0],
        runtime=PLAN.runtime(PLAN.TRAINING["runtime"]),
    params:
        shape=lambda wc, resources, threads: PLAN.note(
            PLAN.job_shape(resources, threads)
        ),
        spec=lambda wc: PLAN.generator_spec(wc.name),
        summary=lambda wc: PLAN.note(
            PLAN.spec_summary(
                PLAN.generator_spec(wc.name),
                PLAN.launch_settings(PLAN.GENERATORS[wc.name]),
            )
        ),
        launch=lambda wc: PLAN.launch_settings(PLAN.GENERATORS[wc.name]),
    message:
        "train generator {wildcards.name} ({params.shape}): {params.summary}"
    script:
        "../workflow_scripts/train.py"


rule weak_pairs:
    """Weak (pseudo-query, pseudo-positive) pairs of one corpus by one method (SCL, ICT or QGen)."""
    input:
        data=lambda wc: PLAN.dataset_marker(wc.corpus),
        model=PLAN.weak_inputs,
        code=PLAN.code(
            "zsdr.training.weak",
            "zsdr.pretrain.spans",
            "zsdr.models.generator",
            "zsdr.models.encoder",
            "zsdr.data.formats",
            script="weak_pairs",
        ),
    output:
        f"{DATA}/{{corpus}}/weak/{{method}}.jsonl",
    log:
        f"{LOGS}/data/weak_{{corpus}}_{{method}}.log",
    wildcard_constraints:
        corpus=PLAN.alternation({c for c, _ in PLAN.WEAK_PAIRS}),
        method="scl|ict|qgen",
    conda:
        PLAN.DENSE_ENV
    resources:
        **PLAN.cluster_resources(
            lambda wc: PLAN.RMSC_QGEN["gpus"] if wc.method == "qgen" else 0
        ),
        mem_mb=16000,
        runtime=PLAN.runtime(240),
    params:
        dataset=lambda wc, input: os.path.dirname(input.data),
        method=lambda wc: wc.method,
        weak=PLAN.RMSC_WEAK,
        qgen=PLAN.RMSC_QGEN,
        tokenizer=PLAN.model_ref(PLAN.WEAK_TOKENIZER),
        generator=lambda wc: (
            PLAN.generator_path(PLAN.RMSC_QGEN["generator"])
            if wc.method == "qgen"
            else None
        ),
        seed=config["seed"],
        device=config["dense"]["device"],
        precision=config["dense"]["precision"],
        summary=lambda wc: PLAN.note(PLAN.weak_summary(wc)),
    message:
        "weak pairs of {wildcards.corpus}: {params.summary}"
    script:
        "../workflow_scripts/weak_pairs.py"


rule rmsc_curves:
    """RMSC Figures 2-3: nDCG@10 on the source dev set and the targets at snapshots during training."""
    input:
        metrics=lambda wc: [p["metrics"] for p in PLAN.rmsc_curve_points(int(wc.n))],
        code=PLAN.code(
            "zsdr.tables.rmsc_figures", "zsdr.tables.figures", script="rmsc_curves"
        ),
    output:
        figure=report(
            f"{RESULTS}/rmsc/figure{{n}}.png",
            caption="../report/paper_figure.rst",
            category="Paper figures",
            subcategory="rmsc",
            labels={"paper": "rmsc", "figure": "{n}"},
        ),
        csv=f"{RESULTS}/rmsc/figure{{n}}.csv",
    log:
        f"{LOGS}/tables/rmsc_figure{{n}}.log",
    wildcard_constraints:
        n="2|3",
    conda:
        "../envs/cpu.yaml"
    resources:
        **PLAN.cluster_resources(),
        mem_mb=1000,
        runtime=PLAN.runtime(5),
    params:
        points=lambda wc: PLAN.rmsc_curve_points(int(wc.n)),
        figure=lambda wc: int(wc.n),
        metric=config["table1"]["metric"],
        scale=config["scale"],
        summary=lambda wc: PLAN.note(PLAN.curves_summary(int(wc.n))),
    message:
        "RMSC figure {wildcards.n}: {params.summary}"
    script:
        "../workflow_scripts/rmsc_curves.py"


rule rmsc:
    """Every RMSC table and figure (results/rmsc/)."""
    input:
        [f"{RESULTS}/{p}/table{n}.csv" for p, n in PLAN.TABLE_SPECS if p == "rmsc"],
        PLAN.RMSC_FIGURES,

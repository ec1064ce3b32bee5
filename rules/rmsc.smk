# RMSC (METHODS.md §5): weak-supervision pairs per corpus (SCL, ICT, QGen), the QGen generator,
# and RMSC's learning-curve figures. The joint training itself is the `train` rule's runs of the
# `mixture` recipes; RMSC's Tables 1-2 are rendered by `paper_table`.


rule build_generator:
    """A randomly initialised tiny T5 query generator over a tiny backbone's tokenizer."""
    input:
        tokenizer=lambda wc: model_files(model_ref(GENERATORS[wc.name]["tokenizer"])),
        code=code("zsdr.models.generator"),
    output:
        f"{MODELS}/generators/{{name}}.init/config.json",
    log:
        f"{LOGS}/train/generator-{{name}}-build.log",
    wildcard_constraints:
        name=alternation(TRAINED_GENERATORS),
    conda:
        "../envs/cpu.yaml"
    resources:
        **cluster_resources(),
        mem_mb=4000,
        runtime=10,
    params:
        tokenizer=lambda wc, input: os.path.dirname(input.tokenizer[0]),
        size=lambda wc: GENERATORS[wc.name]["build"],
        seed=config["seed"],
    script:
        "../workflow_scripts/build_generator.py"


rule train_generator:
    """QGen's generator trained on the source's training pairs (passage -> query), one trainer."""
    input:
        lambda wc: spec_inputs(generator_spec(wc.name)),
        code=code(*TRAINER_CODE, "zsdr.models.generator", "zsdr.training.qgen"),
    output:
        f"{MODELS}/generators/{{name}}/config.json",
        f"{MODELS}/generators/{{name}}/training.json",
    log:
        f"{LOGS}/train/generator-{{name}}.log",
    wildcard_constraints:
        name=alternation(TRAINED_GENERATORS),
    conda:
        DENSE_ENV
    threads: TRAINING["threads"]
    resources:
        **cluster_resources(
            lambda wc: launch_gpus(launch_settings(GENERATORS[wc.name]))
        ),
        mem_mb=16000,
        runtime=TRAINING["runtime"],
    params:
        spec=lambda wc: generator_spec(wc.name),
        summary=lambda wc: spec_summary(
            generator_spec(wc.name), launch_settings(GENERATORS[wc.name])
        ),
        launch=lambda wc: launch_settings(GENERATORS[wc.name]),
    message:
        "train generator {wildcards.name} ({resources.gpu} GPU(s)): {params.summary}"
    script:
        "../workflow_scripts/train.py"


rule weak_pairs:
    """Weak (pseudo-query, pseudo-positive) pairs of one corpus by one method (SCL, ICT or QGen)."""
    input:
        data=lambda wc: dataset_marker(wc.corpus),
        model=weak_inputs,
        code=code(
            "zsdr.training.weak",
            "zsdr.pretrain.spans",
            "zsdr.models.generator",
            "zsdr.models.encoder",
            "zsdr.data.formats",
        ),
    output:
        f"{DATA}/{{corpus}}/weak/{{method}}.jsonl",
    log:
        f"{LOGS}/data/weak_{{corpus}}_{{method}}.log",
    wildcard_constraints:
        corpus=alternation({c for c, _ in WEAK_PAIRS}),
        method="scl|ict|qgen",
    conda:
        DENSE_ENV
    resources:
        **cluster_resources(
            lambda wc: RMSC_QGEN.get("gpus", 0) if wc.method == "qgen" else 0
        ),
        mem_mb=16000,
        runtime=240,
    params:
        dataset=lambda wc, input: os.path.dirname(input.data),
        method=lambda wc: wc.method,
        weak=RMSC_WEAK,
        qgen=RMSC_QGEN,
        tokenizer=model_ref(WEAK_TOKENIZER),
        generator=lambda wc: (
            generator_path(RMSC_QGEN["generator"]) if wc.method == "qgen" else None
        ),
        seed=config["seed"],
        device=config["dense"]["device"],
        precision=config["dense"]["precision"],
        summary=weak_summary,
    message:
        "weak pairs of {wildcards.corpus}: {params.summary}"
    script:
        "../workflow_scripts/weak_pairs.py"


rule rmsc_curves:
    """RMSC Figures 2-3: nDCG@10 on the source dev set and the targets at snapshots during training."""
    input:
        metrics=lambda wc: [p["metrics"] for p in rmsc_curve_points(int(wc.n))],
        code=code("zsdr.tables.rmsc_figures", "zsdr.tables.figures"),
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
        **cluster_resources(),
        mem_mb=1000,
        runtime=5,
    params:
        points=lambda wc: rmsc_curve_points(int(wc.n)),
        figure=lambda wc: int(wc.n),
        metric=config["table1"]["metric"],
        scale=config["scale"],
        summary=lambda wc: curves_summary(int(wc.n)),
    message:
        "RMSC figure {wildcards.n}: {params.summary}"
    script:
        "../workflow_scripts/rmsc_curves.py"


rule rmsc:
    """Every RMSC table and figure (results/rmsc/)."""
    input:
        [f"{RESULTS}/{p}/table{n}.csv" for p, n in TABLE_SPECS if p == "rmsc"],
        RMSC_FIGURES,

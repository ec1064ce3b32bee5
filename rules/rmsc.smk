# RMSC (docs/methods/rmsc.md): weak-supervision pairs per corpus (SCL, ICT, QGen), the QGen generator,
# and RMSC's learning-curve figures. The joint training itself is the `train` rule's runs of the
# `mixture` recipes; RMSC's Tables 1-2 are rendered by `paper_table`.


rule build_generator:
    """A randomly initialised tiny T5 query generator over a tiny backbone's tokenizer."""
    input:
        tokenizer=lambda wc: PLAN.refs.model_files(
            PLAN.refs.model_ref(PLAN.rmsc.generators[wc.name]["tokenizer"])
        ),
        code=PLAN.code("zsdr.models.generator", script="build_generator"),
    output:
        f"{MODELS}/generators/{{name}}.init/config.json",
    log:
        f"{LOGS}/train/generator-{{name}}-build.log",
    wildcard_constraints:
        name=PLAN.alternation(PLAN.rmsc.trained_generators),
    conda:
        "../envs/cpu.yaml"
    resources:
        **PLAN.cluster_resources(),
        mem_mb=4000,
        runtime=PLAN.runtime(10),
    params:
        **PLAN.params("build_generator"),
    script:
        "../workflow_scripts/build_generator.py"


rule train_generator:
    """QGen's generator trained on the source's training pairs (passage -> query), one trainer."""
    input:
        lambda wc: PLAN.generator_job(wc.name).inputs,
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
        name=PLAN.alternation(PLAN.rmsc.trained_generators),
    retries: PLAN.resources.training_retries(workflow)
    conda:
        PLAN.dense_env
    threads: lambda wc: PLAN.generator_job(wc.name).threads
    resources:
        **PLAN.training_request(lambda wc: PLAN.generator_job(wc.name)),
    params:
        **PLAN.params("train_generator"),
    message:
        "train generator {wildcards.name} ({params.shape}): {params.summary}"
    script:
        "../workflow_scripts/train.py"


rule weak_pairs:
    """Weak (pseudo-query, pseudo-positive) pairs of one corpus by one method (SCL, ICT or QGen), and the set's
    statistics (target size, pairs, distinct, repeats, passes, shortfall: zsdr.training.weak.format.pair_statistics).
    """
    input:
        data=lambda wc: PLAN.dataset_marker(wc.corpus),
        # SCL / ICT negatives: documents read by row from the corpus's store
        store=f"{DATA}/{{corpus}}/store/store.json",
        model=PLAN.rmsc.weak_inputs,
        code=PLAN.code(
            "zsdr.training.weak.scl_ict",
            "zsdr.training.weak.qgen_pairs",
            "zsdr.pretrain.spans",
            "zsdr.data.store",
            "zsdr.models.generator",
            "zsdr.models.encoder",
            "zsdr.data.formats",
            script="weak_pairs",
        ),
    output:
        pairs=f"{DATA}/{{corpus}}/weak/{{method}}.jsonl",
        statistics=f"{DATA}/{{corpus}}/weak/{{method}}.stats.json",
    log:
        f"{LOGS}/data/weak_{{corpus}}_{{method}}.log",
    wildcard_constraints:
        corpus=PLAN.alternation({c for c, _ in PLAN.trainings.weak_pairs}),
        method="scl|ict|qgen",
    conda:
        PLAN.dense_env
    resources:
        **PLAN.cluster_resources(
            lambda wc: PLAN.rmsc.qgen["gpus"] if wc.method == "qgen" else 0
        ),
        mem_mb=16000,
        runtime=PLAN.runtime(240),
    params:
        **PLAN.params("weak_pairs"),
    message:
        "weak pairs of {wildcards.corpus}: {params.summary}"
    script:
        "../workflow_scripts/weak_pairs.py"


rule rmsc_curves:
    """RMSC Figures 2-3: nDCG@10 on the source dev set and the targets at snapshots during training."""
    input:
        metrics=lambda wc: [
            p["metrics"] for p in PLAN.figures.rmsc_curve_points(int(wc.n))
        ],
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
        **PLAN.params("rmsc_curves"),
    message:
        "RMSC figure {wildcards.n}: {params.summary}"
    script:
        "../workflow_scripts/rmsc_curves.py"


rule rmsc:
    """Every RMSC table and figure (results/rmsc/)."""
    input:
        [f"{RESULTS}/{p}/table{n}.csv" for p, n in PLAN.tables.specs if p == "rmsc"],
        PLAN.rmsc.figures,

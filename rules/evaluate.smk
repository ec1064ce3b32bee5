# Evaluation: aggregate and per-query metrics of every run (ranx).
#
# One job per dataset evaluates the runs of every evaluated system in one process: ranx's numba
# start-up costs seconds per process, so a job per run would spend most of its time starting.


rule evaluate:
    """Metrics of every table-1 system's run on one dataset's evaluation split."""
    input:
        runs=lambda wc: expand(
            f"{RUNS}/{wc.dataset}/{{s}}.trec", s=PLAN.evaluation.eval_systems
        ),
        data=lambda wc: PLAN.dataset_marker(wc.dataset),
        qrels=lambda wc: PLAN.eval_qrels(wc.dataset),
        code=PLAN.code(
            "zsdr.evaluation.metrics", "zsdr.data.formats", script="evaluate"
        ),
    output:
        [f"{METRICS}/{{dataset}}/{s}.json" for s in PLAN.evaluation.eval_systems],
    log:
        f"{LOGS}/metrics/{{dataset}}.log",
    wildcard_constraints:
        dataset=PLAN.evaluation.evaluate_dataset_constraint(),
    conda:
        "../envs/cpu.yaml"
    resources:
        **PLAN.cluster_resources(),
        mem_mb=4000,
        runtime=PLAN.runtime(30),
    params:
        **PLAN.params("evaluate"),
    script:
        "../workflow_scripts/evaluate.py"


use rule evaluate as evaluate_system with:
    input:
        runs=f"{RUNS}/{{dataset}}/{{system}}.trec",
        data=lambda wc: PLAN.dataset_marker(wc.dataset),
        qrels=lambda wc: PLAN.eval_qrels(wc.dataset),
        code=PLAN.code(
            "zsdr.evaluation.metrics", "zsdr.data.formats", script="evaluate"
        ),
    output:
        f"{METRICS}/{{dataset}}/{{system}}.json",
    log:
        f"{LOGS}/metrics/{{dataset}}_{{system}}.log",
    wildcard_constraints:
        system=PLAN.alternation(PLAN.evaluation.extra_eval_systems),


ruleorder: evaluate > evaluate_system


# Table 1's systems with a model per target (MoDIR, RMSC) exist on every evaluation dataset: there one job
# per dataset evaluates every table-1 system (their `evaluate_system` jobs would each start ranx again).
if set(PLAN.tables.table1_systems) - set(PLAN.evaluation.eval_systems):

    use rule evaluate as evaluate_table1 with:
        input:
            runs=lambda wc: expand(
                f"{RUNS}/{wc.dataset}/{{s}}.trec", s=PLAN.tables.table1_systems
            ),
            data=lambda wc: PLAN.dataset_marker(wc.dataset),
            qrels=lambda wc: PLAN.eval_qrels(wc.dataset),
            code=PLAN.code(
                "zsdr.evaluation.metrics", "zsdr.data.formats", script="evaluate"
            ),
        output:
            [f"{METRICS}/{{dataset}}/{s}.json" for s in PLAN.tables.table1_systems],
        wildcard_constraints:
            dataset=PLAN.alternation(PLAN.datasets.evaluated),

    ruleorder: evaluate_table1 > evaluate
    ruleorder: evaluate_table1 > evaluate_system


rule dataset_stats:
    """Corpus, query and qrels statistics of every split of a dataset (DDR T1, COCO-DR T5)."""
    input:
        data=lambda wc: PLAN.dataset_marker(wc.dataset),
        code=PLAN.code(
            "zsdr.evaluation.analysis", "zsdr.data.formats", script="dataset_stats"
        ),
    output:
        f"{STATS}/{{dataset}}.json",
    log:
        f"{LOGS}/stats/{{dataset}}.log",
    conda:
        "../envs/cpu.yaml"
    resources:
        **PLAN.cluster_resources(),
        mem_mb=4000,
        runtime=PLAN.runtime(60),
    params:
        **PLAN.params("dataset_stats"),
    script:
        "../workflow_scripts/dataset_stats.py"


rule shift_stats:
    """Query-type and unigram weighted Jaccard between the source and a target (COCO-DR T6)."""
    input:
        source=PLAN.dataset_marker(PLAN.datasets.source),
        target=lambda wc: PLAN.dataset_marker(wc.dataset),
        code=PLAN.code(
            "zsdr.evaluation.analysis", "zsdr.data.formats", script="shift_stats"
        ),
    output:
        f"{STATS}/shift/{{dataset}}.json",
    log:
        f"{LOGS}/stats/shift_{{dataset}}.log",
    conda:
        "../envs/cpu.yaml"
    resources:
        **PLAN.cluster_resources(),
        mem_mb=8000,
        runtime=PLAN.runtime(120),
    params:
        **PLAN.params("shift_stats"),
    script:
        "../workflow_scripts/shift_stats.py"

# Reproduction regressions: published values of released checkpoints and BM25 against the pipeline's own
# (zsdr.plan.regressions: which rows are measured, and why the others are not; docs/regressions.md).
#
#   snakemake --cores all regressions/results/regressions.csv --configfile configs/paper.yaml configs/regressions.yaml


use rule evaluate as evaluate_regression with:
    input:
        runs=f"{RUNS}/{{dataset}}/{{system}}.trec",
        data=lambda wc: PLAN.dataset_marker(wc.dataset),
        qrels=lambda wc: PLAN.eval_qrels(wc.dataset),
        code=PLAN.code(
            "zsdr.evaluation.metrics", "zsdr.data.formats", script="evaluate"
        ),
    output:
        f"{METRICS}/regressions/{{dataset}}/{{system}}.json",
    log:
        f"{LOGS}/metrics/regressions/{{dataset}}_{{system}}.log",
    wildcard_constraints:
        dataset="[^/]+",
        system=PLAN.alternation(PLAN.regressions.systems),
    params:
        **PLAN.params("evaluate_regression"),


ruleorder: evaluate_regression > evaluate
ruleorder: evaluate_regression > evaluate_system


rule regressions:
    """Every published value beside the pipeline's: PASS / FAIL / NOT RUN (with its reason) per row."""
    input:
        metrics=PLAN.regressions.metrics_files,
        code=PLAN.code("zsdr.regressions.report", script="regressions"),
    output:
        csv=f"{RESULTS}/regressions.csv",
        md=f"{RESULTS}/regressions.md",
        figure=f"{RESULTS}/regressions.png",
    log:
        f"{LOGS}/results/regressions.log",
    conda:
        "../envs/cpu.yaml"
    resources:
        **PLAN.cluster_resources(),
        mem_mb=2000,
        runtime=PLAN.runtime(10),
    params:
        **PLAN.params("regressions"),
    script:
        "../workflow_scripts/regressions.py"


rule regressions_check:
    """The gate a site runs: fails, naming every FAIL row, when a published value is not reproduced."""
    input:
        f"{RESULTS}/regressions.csv",
    output:
        f"{RESULTS}/regressions.ok",
    log:
        f"{LOGS}/results/regressions_check.log",
    conda:
        "../envs/cpu.yaml"
    resources:
        **PLAN.cluster_resources(),
        mem_mb=1000,
        runtime=PLAN.runtime(5),
    script:
        "../workflow_scripts/regressions_check.py"

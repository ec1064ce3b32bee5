# Evaluation: aggregate and per-query metrics of every run.


rule evaluate:
    """Metrics of one run against the dataset's evaluation split (ranx)."""
    input:
        run=f"{RUNS}/{{dataset}}/{{system}}.trec",
        data=lambda wc: dataset_marker(wc.dataset),
        code=code("zsdr.evaluation.metrics", "zsdr.data.formats"),
    output:
        f"{METRICS}/{{dataset}}/{{system}}.json",
    log:
        f"{LOGS}/metrics/{{dataset}}/{{system}}.log",
    conda:
        "../envs/cpu.yaml"
    resources:
        mem_mb=2000,
        runtime=20,
    params:
        dataset=lambda wc: f"{DATA}/{wc.dataset}",
        split=lambda wc: eval_split(wc.dataset),
        metrics=config["evaluation"]["metrics"],
    script:
        "../workflow_scripts/evaluate.py"

# Tables: the project's head-to-head table and the paper tables.

TABLE1_SYSTEMS = {"bm25-inmemory": "BM25 (k1=0.9, b=0.4, in-memory)"}


rule table1:
    """results/table1.csv: every system that exists so far on the source dev set and every target."""
    input:
        metrics=expand("{m}/{d}/{s}.json", m=METRICS, d=EVAL_DATASETS, s=TABLE1_SYSTEMS),
        code=code("zsdr.tables.table1"),
    output:
        csv=report(
            f"{RESULTS}/table1.csv",
            caption="../report/table1.rst",
            category="Head-to-head",
        ),
        md=f"{RESULTS}/table1.md",
    log:
        f"{LOGS}/tables/table1.log",
    conda:
        "../envs/cpu.yaml"
    resources:
        mem_mb=1000,
        runtime=5,
    params:
        systems=TABLE1_SYSTEMS,
        datasets=EVAL_DATASETS,
        source=SOURCE,
        metric=config["table1"]["metric"],
        scale=config["scale"],
    script:
        "../workflow_scripts/table1.py"

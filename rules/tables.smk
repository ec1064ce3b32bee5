# Tables: the project's head-to-head table and every table of the five papers.


rule table1:
    """results/table1.csv: every configured system on the source dev set and every target."""
    input:
        metrics=expand("{m}/{d}/{s}.json", m=METRICS, d=EVAL_DATASETS, s=TABLE1_SYSTEMS),
        code=code("zsdr.tables", "zsdr.evaluation.significance"),
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
        systems={s: SYSTEMS[s].get("description", "") for s in TABLE1_SYSTEMS},
        baselines=TABLE1_BASELINES,
        datasets=EVAL_DATASETS,
        source=SOURCE,
        metric=config["table1"]["metric"],
        significance=config["evaluation"]["significance"],
        scale=config["scale"],
    script:
        "../workflow_scripts/table1.py"


rule paper_table:
    """One table of one paper, regenerated at this scale beside its published numbers."""
    input:
        metrics=lambda wc: [
            f"{METRICS}/{d}/{s}.json" for d, s in TABLE_CELLS[(wc.paper, int(wc.n))]
        ],
        stats=lambda wc: [
            f"{STATS}/{d}.json" for d in TABLE_STATS[(wc.paper, int(wc.n))]["stats"]
        ],
        shift=lambda wc: [
            f"{STATS}/shift/{d}.json"
            for d in TABLE_STATS[(wc.paper, int(wc.n))]["shift"]
        ],
        spec=table_inputs,
        code=code("zsdr.tables", "zsdr.evaluation.significance"),
    output:
        csv=report(
            f"{RESULTS}/{{paper}}/table{{n}}.csv",
            caption="../report/paper_table.rst",
            category="Paper tables",
            subcategory="{paper}",
            labels={"paper": "{paper}", "table": "{n}"},
        ),
        md=f"{RESULTS}/{{paper}}/table{{n}}.md",
    log:
        f"{LOGS}/tables/{{paper}}_table{{n}}.log",
    wildcard_constraints:
        paper=alternation({p for p, _ in TABLE_SPECS}),
        n=r"\d+",
    conda:
        "../envs/cpu.yaml"
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        paper=lambda wc: wc.paper,
        table=lambda wc: int(wc.n),
        scale=config["scale"],
        datasets_override=TABLE_DATASETS_OVERRIDE,
        available_datasets=TABLE_AVAILABLE_DATASETS,
        produced_systems=sorted(SYSTEMS),
        splits=config["datasets"]["eval_splits"],
        significance=config["evaluation"]["significance"],
    script:
        "../workflow_scripts/paper_table.py"


rule paper_figure:
    """A paper figure whose numbers are one of its tables', drawn from that table's CSV."""
    input:
        table=lambda wc: f"{RESULTS}/{wc.paper}/table{FIGURE_SPECS[(wc.paper, int(wc.n))].table}.csv",
        code=code("zsdr.tables.figures", "zsdr.tables.render"),
    output:
        figure=report(
            f"{RESULTS}/{{paper}}/figure{{n}}.png",
            caption="../report/paper_figure.rst",
            category="Paper figures",
            subcategory="{paper}",
            labels={"paper": "{paper}", "figure": "{n}"},
        ),
    log:
        f"{LOGS}/tables/{{paper}}_figure{{n}}.log",
    wildcard_constraints:
        paper=alternation({p for p, _ in FIGURE_SPECS}),
        n=r"\d+",
    conda:
        "../envs/cpu.yaml"
    resources:
        mem_mb=1000,
        runtime=5,
    params:
        paper=lambda wc: wc.paper,
        figure=lambda wc: int(wc.n),
        scale=config["scale"],
    script:
        "../workflow_scripts/paper_figure.py"


rule tables:
    """Every table of every paper (results/<paper>/table<N>.{csv,md}), their figures, and table 1."""
    input:
        f"{RESULTS}/table1.csv",
        [f"{RESULTS}/{p}/table{n}.csv" for p, n in TABLE_SPECS],
        [f"{RESULTS}/{p}/figure{n}.png" for p, n in FIGURE_SPECS],

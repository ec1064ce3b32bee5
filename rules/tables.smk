# Tables: the project's head-to-head table and every table of the five papers.


rule table1:
    """results/table1.{csv,md,png}: every configured system on the source dev set and every target."""
    input:
        metrics=expand(
            "{m}/{d}/{s}.json",
            m=METRICS,
            d=PLAN.datasets.evaluated,
            s=PLAN.tables.table1_systems,
        ),
        code=PLAN.code("zsdr.tables", "zsdr.evaluation.significance", script="table1"),
        cards=f"{RESULTS}/model_cards.json",
    output:
        csv=report(
            f"{RESULTS}/table1.csv",
            caption="../report/table1.rst",
            category="Head-to-head",
        ),
        md=f"{RESULTS}/table1.md",
        figure=report(
            f"{RESULTS}/table1.png",
            caption="../report/table1_figure.rst",
            category="Head-to-head",
        ),
    log:
        f"{LOGS}/tables/table1.log",
    conda:
        "../envs/cpu.yaml"
    resources:
        **PLAN.cluster_resources(),
        mem_mb=1000,
        runtime=PLAN.runtime(5),
    params:
        **PLAN.params("table1"),
    script:
        "../workflow_scripts/table1.py"


rule model_cards:
    """A model card (README.md) in every trained model folder a table-1 system uses, with its scores."""
    input:
        PLAN.tables.model_card_inputs(),
        code=PLAN.code("zsdr.models.cards", script="model_cards"),
    output:
        cards=[f"{folder}/README.md" for folder in PLAN.tables.model_cards],
        index=f"{RESULTS}/model_cards.json",
    log:
        f"{LOGS}/tables/model_cards.log",
    conda:
        "../envs/cpu.yaml"
    resources:
        **PLAN.cluster_resources(),
        mem_mb=1000,
        runtime=PLAN.runtime(5),
    params:
        **PLAN.params("model_cards"),
    script:
        "../workflow_scripts/model_cards.py"


rule paper_table:
    """One table of one paper, regenerated at this scale beside its published numbers."""
    input:
        metrics=PLAN.tables.table_cell_files,
        stats=lambda wc: [
            f"{STATS}/{d}.json"
            for d in PLAN.tables.stats[(wc.paper, int(wc.n))]["stats"]
        ],
        shift=lambda wc: [
            f"{STATS}/shift/{d}.json"
            for d in PLAN.tables.stats[(wc.paper, int(wc.n))]["shift"]
        ],
        spec=PLAN.tables.table_inputs,
        rems=lambda wc: [
            f
            for m in PLAN.tables.rem_models((wc.paper, int(wc.n))).values()
            for f in PLAN.refs.model_files(m)
        ],
        code=PLAN.code(
            "zsdr.tables", "zsdr.evaluation.significance", script="paper_table"
        ),
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
        paper=PLAN.alternation({p for p, _ in PLAN.tables.specs}),
        n=r"\d+",
    conda:
        "../envs/cpu.yaml"
    resources:
        **PLAN.cluster_resources(),
        mem_mb=2000,
        runtime=PLAN.runtime(10),
    params:
        **PLAN.params("paper_table"),
    script:
        "../workflow_scripts/paper_table.py"


rule paper_figure:
    """A paper figure whose numbers are one of its tables', drawn from that table's CSV."""
    input:
        table=lambda wc: f"{RESULTS}/{wc.paper}/table{FIGURE_SPECS[(wc.paper, int(wc.n))].table}.csv",
        code=PLAN.code(
            "zsdr.tables.figures", "zsdr.tables.render", script="paper_figure"
        ),
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
        paper=PLAN.alternation({p for p, _ in FIGURE_SPECS}),
        # only the (paper, figure) pairs of FIGURE_SPECS: n is matched with the paper before it, so a
        # figure another rule draws (results/cocodr/figure3.png) never reaches the input function
        n="|".join(
            rf"(?<=/{PLAN.alternation([p])}/figure){n}"
            for p, n in sorted(FIGURE_SPECS)
        ),
    conda:
        "../envs/cpu.yaml"
    resources:
        **PLAN.cluster_resources(),
        mem_mb=1000,
        runtime=PLAN.runtime(5),
    params:
        **PLAN.params("paper_figure"),
    script:
        "../workflow_scripts/paper_figure.py"


rule tables:
    """Every table of every paper (results/<paper>/table<N>.{csv,md}), their figures, and table 1."""
    input:
        f"{RESULTS}/table1.csv",
        [f"{RESULTS}/{p}/table{n}.csv" for p, n in PLAN.tables.specs],
        [f"{RESULTS}/{p}/figure{n}.png" for p, n in FIGURE_SPECS],
        PLAN.berm.figures,
        PLAN.ddr.figures,
        PLAN.modir.figures,
        PLAN.cocodr.figures,
        PLAN.rmsc.figures,


rule all_results:
    """`results/all`: every table and figure of every paper with its SHA-256, in `sha256sum` format
    (`sha256sum -c results/all` checks a regeneration against it)."""
    input:
        files=rules.tables.input,
        code=PLAN.code("zsdr.tables.manifest", script="manifest"),
    output:
        f"{RESULTS}/all",
    log:
        f"{LOGS}/results/all.log",
    conda:
        "../envs/cpu.yaml"
    resources:
        **PLAN.cluster_resources(),
        mem_mb=1000,
        runtime=PLAN.runtime(5),
    script:
        "../workflow_scripts/manifest.py"


rule berm:
    """Every BERM table and figure (results/berm/)."""
    input:
        [f"{RESULTS}/{p}/table{n}.csv" for p, n in PLAN.tables.specs if p == "berm"],
        PLAN.berm.figures,


rule ddr:
    """Every DDR table and figure (results/ddr/)."""
    input:
        [f"{RESULTS}/{p}/table{n}.csv" for p, n in PLAN.tables.specs if p == "ddr"],
        PLAN.ddr.figures,


rule ddr_figure4:
    """DDR Figure 4: R@1000 on each target vs the target DAM's training time (REM on DAM snapshots)."""
    input:
        metrics=[p["metrics"] for p in PLAN.job("ddr_figure4").points],
        baseline=list(PLAN.job("ddr_figure4").baseline.values()),
        dams=[
            f
            for m in PLAN.job("ddr_figure4").dams.values()
            for f in PLAN.refs.model_files(m)
        ],
        code=PLAN.code(
            "zsdr.tables.ddr_figures", "zsdr.tables.figures", script="ddr_figure4"
        ),
    output:
        figure=report(
            f"{RESULTS}/ddr/figure4.png",
            caption="../report/paper_figure.rst",
            category="Paper figures",
            subcategory="ddr",
            labels={"paper": "ddr", "figure": "4"},
        ),
        csv=f"{RESULTS}/ddr/figure4.csv",
    log:
        f"{LOGS}/tables/ddr_figure4.log",
    conda:
        "../envs/cpu.yaml"
    resources:
        **PLAN.cluster_resources(),
        mem_mb=1000,
        runtime=PLAN.runtime(5),
    params:
        **PLAN.params("ddr_figure4"),
    script:
        "../workflow_scripts/ddr_figure4.py"


rule berm_figure4:
    """BERM Figure 4: average target nDCG@10 over the (alpha, beta) grid of loss weights."""
    input:
        metrics=[f for p in PLAN.figures.berm_grid_points() for f in p["metrics"]],
        code=PLAN.code(
            "zsdr.tables.berm_figures", "zsdr.tables.figures", script="berm_figure4"
        ),
    output:
        figure=report(
            f"{RESULTS}/berm/figure4.png",
            caption="../report/paper_figure.rst",
            category="Paper figures",
            subcategory="berm",
            labels={"paper": "berm", "figure": "4"},
        ),
        csv=f"{RESULTS}/berm/figure4.csv",
    log:
        f"{LOGS}/tables/berm_figure4.log",
    conda:
        "../envs/cpu.yaml"
    resources:
        **PLAN.cluster_resources(),
        mem_mb=1000,
        runtime=PLAN.runtime(5),
    params:
        **PLAN.params("berm_figure4"),
    script:
        "../workflow_scripts/berm_figure4.py"


rule berm_figure5:
    """BERM Figure 5: t-SNE of source and target passages under DPR and DPR+BERM."""
    input:
        models=[
            PLAN.refs.model_files(m) for m in PLAN.job("berm_figure5").models.values()
        ],
        data=[f"{d}/dataset.json" for d in PLAN.job("berm_figure5").domains.values()],
        code=PLAN.code(
            "zsdr.evaluation.tsne",
            "zsdr.models.encoder",
            "zsdr.tables.figures",
            script="berm_figure5",
        ),
    output:
        figure=report(
            f"{RESULTS}/berm/figure5.png",
            caption="../report/paper_figure.rst",
            category="Paper figures",
            subcategory="berm",
            labels={"paper": "berm", "figure": "5"},
        ),
        csv=f"{RESULTS}/berm/figure5.csv",
        summary=f"{RESULTS}/berm/figure5.json",
    log:
        f"{LOGS}/tables/berm_figure5.log",
    conda:
        PLAN.dense_env
    resources:
        **PLAN.cluster_resources(PLAN.resources.dense_gpus),
        mem_mb=8000,
        runtime=PLAN.runtime(60),
    params:
        **PLAN.params("berm_figure5"),
    script:
        "../workflow_scripts/berm_figure5.py"

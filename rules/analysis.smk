# BERM's unit-level analyses (Tables 5 and 6): how a trained encoder represents the sentence units
# of the labelled test passages (zsdr.evaluation.unit_analysis). The output reads like a metrics
# file, so the paper tables render it (`source: units` specs); the `.units.json` suffix keeps it
# apart from the evaluate rules' metrics/<dataset>/<system>.json.


rule berm_unit_analysis:
    """Unit variance (R1), essential-unit accuracy (R2) and unit similarity of one system on one dataset."""
    input:
        model=PLAN.systems.dense_model_input,
        labels=lambda wc: PLAN.berm.analysis_labels(wc.dataset),
        data=lambda wc: PLAN.dataset_marker(wc.dataset),
        code=PLAN.code(
            "zsdr.evaluation.unit_analysis",
            "zsdr.training.berm_term",
            "zsdr.losses.semantic_units",
            "zsdr.data.units",
            "zsdr.models.encoder",
            "zsdr.data.formats",
            script="berm_unit_analysis",
        ),
    output:
        f"{METRICS}/{{dataset}}/{{system}}.units.json",
    log:
        f"{LOGS}/metrics/{{dataset}}_{{system}}.units.log",
    wildcard_constraints:
        dataset=r"[^/]+",
        system=PLAN.alternation(PLAN.systems.dense),
    conda:
        PLAN.dense_env
    resources:
        **PLAN.cluster_resources(PLAN.resources.dense_gpus),
        mem_mb=16000,
        runtime=PLAN.runtime(120),
    params:
        **PLAN.params("berm_unit_analysis"),
    script:
        "../workflow_scripts/berm_unit_analysis.py"

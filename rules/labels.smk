# BERM's essential-unit labels: for every training pair (and sampled test pairs for the BERM
# analyses) the positive passage's sentence units, their BM25 and reader scores and the essential
# unit (zsdr.training.unit_labels). Sharded because the reader pass is the expensive part.


rule unit_stats:
    """Collection statistics of the unit BM25 (config berm.labels.collection), once per split."""
    input:
        data=lambda wc: PLAN.dataset_marker(wc.dataset),
        store=f"{DATA}/{{dataset}}/store/store.json",
        code=PLAN.code(
            "zsdr.training.unit_labels",
            "zsdr.sparse.unit_bm25",
            "zsdr.data.units",
            "zsdr.data.formats",
            script="unit_stats",
        ),
    output:
        f"{DATA}/{{dataset}}/berm/{{split}}/unit_stats.json",
    log:
        f"{LOGS}/data/unit_stats_{{dataset}}_{{split}}.log",
    conda:
        "../envs/cpu.yaml"
    resources:
        **PLAN.cluster_resources(),
        mem_mb=16000,
        runtime=PLAN.runtime(120),
    params:
        **PLAN.params("unit_stats"),
    script:
        "../workflow_scripts/unit_stats.py"


rule label_units_shard:
    """One shard of the pairs: units, BM25 + delta x reader scores, the essential unit."""
    input:
        data=lambda wc: PLAN.dataset_marker(wc.dataset),
        store=f"{DATA}/{{dataset}}/store/store.json",
        stats=f"{DATA}/{{dataset}}/berm/{{split}}/unit_stats.json",
        reader=lambda wc: PLAN.berm.reader_files(),
        code=PLAN.code(
            "zsdr.training.unit_labels",
            "zsdr.sparse.unit_bm25",
            "zsdr.data.units",
            "zsdr.data.formats",
            "zsdr.models.reader",
            "zsdr.models.encoder",
            script="label_units_shard",
        ),
    output:
        temp(f"{DATA}/{{dataset}}/berm/{{split}}/labels.{{shard}}-of-{{shards}}.jsonl"),
    log:
        f"{LOGS}/data/label_units_{{dataset}}_{{split}}_{{shard}}-of-{{shards}}.log",
    wildcard_constraints:
        shard=r"\d+",
        shards=r"\d+",
    conda:
        "../envs/gpu.yaml"
    resources:
        **PLAN.cluster_resources(PLAN.berm.labels["gpus"]),
        mem_mb=16000,
        runtime=PLAN.work.label_runtime,
    params:
        **PLAN.params("label_units_shard"),
    script:
        "../workflow_scripts/label_units_shard.py"


rule label_units:
    """All shards of a split joined, with a summary (agreement with the mini generator's truth)."""
    input:
        shards=lambda wc: PLAN.berm.label_shards(wc.dataset, wc.split),
        data=lambda wc: PLAN.dataset_marker(wc.dataset),
        code=PLAN.code(
            "zsdr.training.unit_labels", "zsdr.data.formats", script="label_units"
        ),
    output:
        labels=f"{DATA}/{{dataset}}/berm/{{split}}/labels.jsonl",
        summary=f"{DATA}/{{dataset}}/berm/{{split}}/summary.json",
    log:
        f"{LOGS}/data/label_units_{{dataset}}_{{split}}.log",
    conda:
        "../envs/cpu.yaml"
    resources:
        **PLAN.cluster_resources(),
        mem_mb=4000,
        runtime=PLAN.runtime(30),
    params:
        **PLAN.params("label_units"),
    script:
        "../workflow_scripts/label_units.py"

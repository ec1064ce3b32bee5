# Domain pretraining: DDR's domain adaption modules (masked language modelling on one corpus,
# zsdr.pretrain.mlm), named by their chain <backbone>--<corpus>[--<corpus>] (rules/common.smk).


rule train_dam:
    """A DAM: MLM on its last corpus, from the backbone or from the DAM before it in the chain."""
    input:
        lambda wc: spec_inputs(dam_spec(wc.dam)),
        code=code(*TRAINER_CODE, "zsdr.pretrain"),
    output:
        f"{MODELS}/dams/{{dam}}/config.json",
        f"{MODELS}/dams/{{dam}}/training.json",
    log:
        f"{LOGS}/train/dam-{{dam}}.log",
    wildcard_constraints:
        dam=r"[^/]+--[^/]+",
    conda:
        DENSE_ENV
    threads: TRAINING["threads"]
    resources:
        **cluster_resources(lambda wc: launch_gpus(dam_launch(wc.dam))),
        mem_mb=32000,
        runtime=TRAINING["runtime"],
    params:
        spec=lambda wc: dam_spec(wc.dam),
        summary=lambda wc: spec_summary(dam_spec(wc.dam), dam_launch(wc.dam)),
        launch=lambda wc: dam_launch(wc.dam),
    message:
        "train DAM {wildcards.dam} ({resources.gpu} GPU(s)): {params.summary}"
    script:
        "../workflow_scripts/train.py"

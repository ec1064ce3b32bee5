# Domain pretraining: DDR's domain adaption modules (masked language modelling on one corpus,
# zsdr.pretrain.mlm), named by their chain <backbone>--<corpus>[--<corpus>] (rules/common.smk).


rule train_dam:
    """A DAM: MLM on its last corpus, from the backbone or from the DAM before it in the chain."""
    input:
        lambda wc: PLAN.dam_job(wc.dam).inputs,
        code=PLAN.code(*PLAN.TRAINER_CODE, "zsdr.pretrain", script="train"),
    output:
        f"{MODELS}/dams/{{dam}}/config.json",
        f"{MODELS}/dams/{{dam}}/training.json",
    log:
        f"{LOGS}/train/dam-{{dam}}.log",
    wildcard_constraints:
        dam=r"[^/]+--[^/]+",
    retries: PLAN.resources.training_retries(workflow)
    conda:
        PLAN.dense_env
    threads: lambda wc: PLAN.dam_job(wc.dam).threads
    resources:
        **PLAN.training_request(lambda wc: PLAN.dam_job(wc.dam)),
    params:
        **PLAN.params("train_dam"),
    message:
        "train DAM {wildcards.dam} ({params.shape}): {params.summary}"
    script:
        "../workflow_scripts/train.py"

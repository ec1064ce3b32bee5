# Domain pretraining: DDR's domain adaption modules (masked language modelling on one corpus,
# zsdr.pretrain.mlm), named by their chain <backbone>--<corpus>[--<corpus>] (rules/common.smk).


rule train_dam:
    """A DAM: MLM on its last corpus, from the backbone or from the DAM before it in the chain."""
    input:
        lambda wc: PLAN.spec_inputs(PLAN.dam_spec(wc.dam)),
        code=PLAN.code(*PLAN.TRAINER_CODE, "zsdr.pretrain", script="train"),
    output:
        f"{MODELS}/dams/{{dam}}/config.json",
        f"{MODELS}/dams/{{dam}}/training.json",
    log:
        f"{LOGS}/train/dam-{{dam}}.log",
    wildcard_constraints:
        dam=r"[^/]+--[^/]+",
    retries: PLAN.training_retries(workflow)
    conda:
        PLAN.DENSE_ENV
    threads: PLAN.training_threads(launch=lambda wc: PLAN.dam_launch(wc.dam))
    resources:
        **PLAN.cluster_resources(
            lambda wc: PLAN.launch_gpus(PLAN.dam_launch(wc.dam)),
            nodes=lambda wc: PLAN.dam_launch(wc.dam)["nodes"],
        ),
        mem_mb=lambda wc: PLAN.training_memory(
            PLAN.dam_spec(wc.dam), PLAN.dam_launch(wc.dam)
        )[0],
        runtime=PLAN.runtime(PLAN.TRAINING["runtime"]),
    params:
        shape=lambda wc, resources, threads: PLAN.note(
            PLAN.job_shape(resources, threads)
        ),
        spec=lambda wc: PLAN.dam_spec(wc.dam),
        summary=lambda wc: PLAN.note(
            PLAN.spec_summary(PLAN.dam_spec(wc.dam), PLAN.dam_launch(wc.dam))
        ),
        launch=lambda wc: PLAN.dam_launch(wc.dam),
    message:
        "train DAM {wildcards.dam} ({params.shape}): {params.summary}"
    script:
        "../workflow_scripts/train.py"

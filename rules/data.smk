# Datasets: the generated mini benchmark, registry downloads and conversions, tiny backbones.


rule mini_benchmark:
    """Generate the synthetic source and target domains (zsdr.data.mini)."""
    input:
        PLAN.code(
            "zsdr.data.mini",
            "zsdr.data.formats",
            "zsdr.data.bm25",
            script="mini_benchmark",
        ),
    output:
        expand(
            "{data}/{name}/{f}",
            data=DATA,
            name=PLAN.datasets.mini,
            f=["corpus.jsonl", "queries.jsonl", "dataset.json"],
        ),
        training=expand(
            "{data}/{name}/{f}",
            data=DATA,
            name=PLAN.datasets.mini_sources,
            f=["negatives.jsonl", "triples.train.tsv"],
        ),
        mini=f"{DATA}/mini.json",
    log:
        f"{LOGS}/data/mini_benchmark.log",
    conda:
        "../envs/cpu.yaml"
    resources:
        **PLAN.cluster_resources(),
        mem_mb=2000,
        runtime=PLAN.runtime(10),
    params:
        **PLAN.params("mini_benchmark"),
    script:
        "../workflow_scripts/mini_benchmark.py"


rule mini_benchmark_zh:
    """Generate the Chinese mini benchmark's source and target domains (zsdr.data.mini, language zh)."""
    input:
        PLAN.code(
            "zsdr.data.mini",
            "zsdr.data.formats",
            "zsdr.data.bm25",
            script="mini_benchmark_zh",
        ),
    output:
        expand(
            "{data}/{name}/{f}",
            data=DATA,
            name=PLAN.datasets.mini_zh,
            f=["corpus.jsonl", "queries.jsonl", "dataset.json"],
        ),
        training=expand(
            "{data}/{name}/{f}",
            data=DATA,
            name=(
                [PLAN.datasets.mini_zh_source] if PLAN.datasets.mini_zh_source else []
            ),
            f=["negatives.jsonl", "triples.train.tsv"],
        ),
        mini=f"{DATA}/mini-zh.json",
    log:
        f"{LOGS}/data/mini_benchmark_zh.log",
    conda:
        "../envs/cpu.yaml"
    resources:
        **PLAN.cluster_resources(),
        mem_mb=2000,
        runtime=PLAN.runtime(10),
    params:
        **PLAN.params("mini_benchmark_zh"),
    script:
        "../workflow_scripts/mini_benchmark_zh.py"


rule download:
    """One remote file, resumable and checksum-verified, into downloads/<host>/<path>."""
    output:
        f"{DOWNLOADS}/{{path}}",
    log:
        f"{LOGS}/download/{{path}}.log",
    wildcard_constraints:
        path=PLAN.alternation(PLAN.datasets.remote),
    retries: 1
    conda:
        "../envs/cpu.yaml"
    resources:
        **PLAN.cluster_resources(),
        mem_mb=500,
        runtime=PLAN.runtime(600),
        downloads=1,
    params:
        **PLAN.params("download"),
    script:
        "../workflow_scripts/download.py"


rule convert:
    """Extract, convert to the BEIR layout and validate one dataset: a registry dataset from its downloads, or
    from a local BEIR-layout folder (bring your own, config `datasets.local`) whose files are the job's inputs.
    """
    input:
        files=PLAN.convert_inputs,
        code=PLAN.code(
            "zsdr.data.fetch",
            "zsdr.data.convert",
            "zsdr.data.download",
            "zsdr.data.formats",
            script="convert",
        ),
    output:
        f"{DATA}/{{dataset}}/dataset.json",
    log:
        f"{LOGS}/data/convert_{{dataset}}.log",
    wildcard_constraints:
        dataset=PLAN.alternation(PLAN.datasets.convertible),
    conda:
        "../envs/cpu.yaml"
    resources:
        **PLAN.cluster_resources(),
        mem_mb=8000,
        runtime=PLAN.runtime(240),
    params:
        **PLAN.params("convert"),
    script:
        "../workflow_scripts/convert.py"


rule tiny_backbone:
    """A tiny BERT/RoBERTa-shaped masked LM and its tokenizer, trained on the mini corpora of its language."""
    input:
        data=lambda wc: [
            PLAN.dataset_marker(n) for n in PLAN.datasets.backbone_corpus[wc.backbone]
        ],
        code=PLAN.code("zsdr.models.tiny", script="tiny_backbone"),
    output:
        f"{MODELS}/backbones/{{backbone}}/config.json",
        f"{MODELS}/backbones/{{backbone}}/tokenizer.json",
    log:
        f"{LOGS}/models/tiny_backbone_{{backbone}}.log",
    wildcard_constraints:
        backbone=PLAN.alternation(PLAN.datasets.built_backbones),
    conda:
        "../envs/cpu.yaml"
    resources:
        **PLAN.cluster_resources(),
        mem_mb=2000,
        runtime=PLAN.runtime(10),
    params:
        **PLAN.params("tiny_backbone"),
    script:
        "../workflow_scripts/tiny_backbone.py"


rule data:
    """Every dataset of the config (source, targets, extras) with its training-side downloads."""
    input:
        [PLAN.dataset_marker(n) for n in PLAN.datasets.configured],
        [
            p
            for n in PLAN.datasets.fetched
            for p in PLAN.datasets.downloads_of(n, extras=True)
        ],
        [f"{MODELS}/backbones/{b}/config.json" for b in PLAN.datasets.built_backbones],


RELEASED_ENCODERS = [n for n, r in RELEASES.items() if r.kind in ("ance", "condenser")]
RELEASED_REMS = [n for n, r in RELEASES.items() if r.kind == "adapter-rem"]


rule released_encoder:
    """A released archive as a model folder: ANCE-format checkpoints (ANCE warmup, MoDIR's) as encoders, the
    Condenser with its head (COCO-DR's COCO init)."""
    input:
        archive=lambda wc: PLAN.datasets.released_archive(wc.release),
        code=PLAN.code(
            "zsdr.models.released", "zsdr.models.encoder", script="released_model"
        ),
    output:
        f"{MODELS}/released/{{release}}/config.json",
    log:
        f"{LOGS}/models/released_{{release}}.log",
    wildcard_constraints:
        release=PLAN.alternation(RELEASED_ENCODERS),
    conda:
        "../envs/cpu.yaml"
    resources:
        **PLAN.cluster_resources(),
        mem_mb=4000,
        runtime=PLAN.runtime(30),
    script:
        "../workflow_scripts/released_model.py"


rule released_rem:
    """One of DDR's released REMs (adapter-transformers archives) in the project's REM format."""
    input:
        archive=lambda wc: PLAN.datasets.released_archive(wc.release),
        code=PLAN.code(
            "zsdr.models.released", "zsdr.models.encoder", script="released_model"
        ),
    output:
        f"{MODELS}/released/{{release}}/rem.json",
    log:
        f"{LOGS}/models/released_{{release}}.log",
    wildcard_constraints:
        release=PLAN.alternation(RELEASED_REMS),
    conda:
        "../envs/cpu.yaml"
    resources:
        **PLAN.cluster_resources(),
        mem_mb=4000,
        runtime=PLAN.runtime(30),
    script:
        "../workflow_scripts/released_model.py"


rule text_store:
    """A dataset's corpus and queries as memory-mapped Arrow stores with an id index
    (zsdr.data.store), built once and mapped by every training process that reads the dataset.
    """
    input:
        f"{DATA}/{{dataset}}/dataset.json",
        code=PLAN.code("zsdr.data.store", script="text_store"),
    output:
        f"{DATA}/{{dataset}}/store/store.json",
    log:
        f"{LOGS}/data/text_store_{{dataset}}.log",
    wildcard_constraints:
        dataset="[^/]+",
    conda:
        "../envs/cpu.yaml"
    resources:
        **PLAN.cluster_resources(),
        mem_mb=4000,
        runtime=PLAN.runtime(120),
    script:
        "../workflow_scripts/text_store.py"


rule corpus_overlap:
    """The documents a dataset's corpus shares with its `datasets.shared_corpus` donor (the same id, title
    and text): per row, the donor's row or -1, and the counts."""
    input:
        store=f"{DATA}/{{dataset}}/store/store.json",
        donor=f"{DATA}/{{donor}}/store/store.json",
        code=PLAN.code("zsdr.data.store", script="corpus_overlap"),
    output:
        f"{DATA}/{{dataset}}/overlap/{{donor}}.npy",
        f"{DATA}/{{dataset}}/overlap/{{donor}}.json",
    log:
        f"{LOGS}/data/corpus_overlap_{{dataset}}_{{donor}}.log",
    wildcard_constraints:
        dataset=PLAN.alternation(PLAN.datasets.shared_corpus),
        donor=PLAN.alternation(PLAN.datasets.shared_corpus.values()),
    conda:
        "../envs/cpu.yaml"
    resources:
        **PLAN.cluster_resources(),
        mem_mb=4000,
        runtime=PLAN.runtime(60),
    params:
        **PLAN.params("corpus_overlap"),
    script:
        "../workflow_scripts/corpus_overlap.py"

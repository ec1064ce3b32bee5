"""Recipes: a recipe composes a model, a batch source and loss terms into the task the one Trainer trains.

A recipe is described by a *spec* (a JSON-able dict, the ``recipes.<name>`` config section
resolved by the workflow into paths): :func:`build_task` builds the task it trains, and
:func:`zsdr.training.launch.run_spec` trains it (in this process, or in each of several processes
:func:`zsdr.training.launch.launch` starts).

Spec keys shared by every recipe: ``kind`` (``bi_encoder`` | ``cross_encoder`` | ``reader`` | ``mlm`` | ``coco`` |
``mixture`` | ``generator``),
``init`` (model folder or Hugging Face id), ``dataset`` (BEIR folder with the texts), ``negatives``
(negatives file; readers have none), ``systems`` (which negative systems of that file; null = all),
``teacher`` (teacher-score file or null), ``out`` (model folder), ``checkpoint_dir``, ``train`` (:class:`TrainConfig`
fields; ``schedule_offset`` places an ANCE episode inside one run-wide schedule), ``dropout`` (the
recipe's, else ``training.dropout``; null keeps the checkpoint's), ``max_examples``, ``info`` (copied into
``training.json``). Bi-encoders add ``encoder`` (:class:`~zsdr.models.encoder.EncoderConfig`
overrides), ``loss``, ``negatives_per_query``, ``scale`` and optionally ``berm`` (BERM's R1/R2 loss
term, :class:`zsdr.training.berm_term.BermConfig`: ``labels`` file, ``r1_weight``, ``r2_weight``,
``double_softmax``, ``r1_reduction``), ``modir`` (MoDIR's adversarial term, :class:`zsdr.training.modir.ModirConfig`:
``triples`` and ``target`` plus the classifier and loss settings), ``dro`` (COCO-DR's iDRO or the
GroupDRO baseline over query clusters, ``pairwise_nll`` only, :class:`zsdr.training.idro.DroConfig`:
``kind``, ``clusters_file``, ``clusters`` and the weight-update settings; these three are the loss terms
registered in :data:`zsdr.training.terms.TERMS`, and any registered term's section is read the same way) and ``rem`` (DDR: :class:`zsdr.models.adapters.RemConfig`; the ``init`` model is
frozen and only the REM trains); masked-LM pretraining (``mlm``, DDR's DAMs) ``max_length`` and
``mlm_probability`` (:func:`zsdr.pretrain.mlm.build_mlm_task`); COCO pretraining (``coco``, COCO-DR) has
``spans`` (span files, no ``dataset``), ``max_length``, ``mlm_probability``, ``head_layers``, ``skip_from``,
``late_mlm``, ``contrastive_weight`` and ``backbone_dropout`` (:func:`zsdr.pretrain.coco.build_coco_task`); RMSC's
joint training (``mixture``) has ``sets`` (supervision sets, no ``dataset``), ``encoder``, ``scale``,
``group_negatives`` and ``soft_tokens`` (:func:`zsdr.training.rmsc.build_mixture_task`); cross-encoders ``max_length`` and
``negatives_per_query``; readers ``max_length`` and ``units`` (the ``units.jsonl`` answer spans, of
which only the pairs of the dataset's ``train`` qrels are used); query generators (``generator``, RMSC's QGen:
a seq2seq model trained on passage -> query, :func:`zsdr.training.qgen.build_generator_task`) ``split`` (whose
qrels give the positive pairs, default ``train``), ``max_length`` (passage tokens, 256) and ``query_max_length``
(64), with ``init`` a seq2seq folder (:func:`zsdr.models.generator.build_tiny_generator`) or Hugging Face id.
"""

from __future__ import annotations

from pathlib import Path


KINDS = ("bi_encoder", "cross_encoder", "reader", "mlm", "coco", "mixture", "generator")


def spec_fingerprint(spec: dict) -> str:
    """The fingerprint a checkpoint of ``spec`` is kept under: the spec (less how its loop runs) and its input
    files; a resumed run continues only a checkpoint of the same fingerprint."""
    from zsdr.training.terms import term_input_files
    from zsdr.training.checkpoints import fingerprint_of

    files = [spec[k] for k in ("negatives", "teacher", "units") if spec.get(k)]
    files += term_input_files(spec)
    if spec.get("kind") == "coco":
        files += [spec["spans"]] if isinstance(spec["spans"], str) else list(spec["spans"])
    elif spec.get("kind") == "mixture":
        for entry in spec["sets"]:
            files += [str(Path(entry["dataset"]) / "corpus.jsonl")] + ([entry["pairs"]] if entry.get("pairs") else [])
    else:
        files += [str(Path(spec["dataset"]) / "corpus.jsonl")]
    init = Path(spec["init"])
    if init.is_dir():
        files += sorted(str(p) for p in init.iterdir() if p.is_file())
    # how the loop runs (loop: batch workers, compiling) changes no batch: a checkpoint serves either way
    keep = {k: v for k, v in spec.items() if k not in ("info", "checkpoint_dir", "progress", "loop")}
    return fingerprint_of(keep, files)


def training_arrays(spec: dict) -> Path | None:
    """Where a bi-encoder / cross-encoder spec's training arrays live: in its checkpoint folder, named by
    the fingerprint of the spec and its inputs (a new negatives file or teacher gets new arrays), so the
    processes of a job map one copy and a resumed job finds it; None without a checkpoint folder."""
    if spec.get("kind", "bi_encoder") not in ("bi_encoder", "cross_encoder") or not spec.get("checkpoint_dir"):
        return None
    return Path(spec["checkpoint_dir"]) / f"arrays-{spec_fingerprint(spec)}"


def training_set(spec: dict):
    """The spec's :class:`~zsdr.data.training_set.TrainingSet` (its arrays built first when missing)."""
    from zsdr.data.training_set import TrainingSet

    return TrainingSet(spec["dataset"], spec["negatives"], systems=spec.get("systems"), teacher=spec.get("teacher"),
                       max_examples=spec.get("max_examples"), arrays=training_arrays(spec),
                       unit=spec.get("examples", "queries"))


def build_task(spec: dict):
    """The task (``nn.Module``) a spec trains."""
    import torch

    from zsdr.models.encoder import set_dropout
    from zsdr.training.tasks import BiEncoderTask, CrossEncoderTask

    kind = spec.get("kind", "bi_encoder")
    if kind not in KINDS:
        raise ValueError(f"recipe kind {kind!r}: expected one of {', '.join(KINDS)}")
    seed = int(spec["train"]["seed"])
    torch.manual_seed(seed)
    if kind == "mlm":
        from zsdr.pretrain.mlm import build_mlm_task

        return build_mlm_task(spec)
    if kind == "coco":
        from zsdr.pretrain.coco import build_coco_task

        return build_coco_task(spec)
    if kind == "mixture":
        from zsdr.training.rmsc import build_mixture_task

        return build_mixture_task(spec)
    if kind == "generator":
        from zsdr.training.qgen import build_generator_task

        return build_generator_task(spec)
    if kind == "reader":
        from zsdr.models.reader import Reader
        from zsdr.training.data import reader_examples
        from zsdr.training.tasks import ReaderTask

        reader = Reader.from_pretrained(spec["init"], max_length=spec["max_length"])
        set_dropout(reader.model, spec.get("dropout"))
        reader.train()
        examples = reader_examples(spec["dataset"], spec["units"], max_examples=spec.get("max_examples"))
        return ReaderTask(reader, examples)
    data = training_set(spec)
    if kind == "cross_encoder":
        from zsdr.models.cross_encoder import CrossEncoder

        model = CrossEncoder.from_pretrained(spec["init"], head=spec["head"],
                                             max_length=spec["max_length"])
        set_dropout(model.model, spec.get("dropout"))
        model.train()
        return CrossEncoderTask(model, data, negatives=spec["negatives_per_query"], seed=seed)
    from zsdr.models.encoder import Encoder

    # a trained init continues from the settings it was trained at, not those its system retrieves with
    encoder = Encoder.from_pretrained(spec["init"], head=spec.get("head"), retrieval=False, **spec.get("encoder", {}))
    encoder.retrieval = dict(spec.get("retrieval") or {})
    set_dropout(encoder.backbone, spec.get("dropout"))
    if spec.get("rem"):
        from zsdr.models.adapters import RemConfig

        encoder.add_rem(RemConfig.from_dict(spec["rem"]))  # freezes the DAM: only the REM trains
    encoder.train()
    from zsdr.training.terms import build_terms

    return BiEncoderTask(encoder, data, loss=spec["loss"], negatives=spec["negatives_per_query"],
                         scale=spec["scale"], seed=seed, terms=build_terms(spec, encoder))

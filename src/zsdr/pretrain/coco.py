"""COCO-DR's continuous contrastive pretraining (COCO): coCondenser on the target corpora.

A masked LM (``AutoModelForMaskedLM``, BERT- or RoBERTa-shaped) with a Condenser head is trained
on pairs of spans of the same document (:mod:`zsdr.pretrain.spans`; official code:
``COCO-DR/COCO`` after Gao & Callan's ``coCondenser``):

* **pairs**: every time document ``i`` is drawn in epoch ``e``, two distinct spans are picked by
  ``numpy.random.default_rng([seed, e, i])``; the batch holds them side by side (rows
  ``x1_0, x2_0, x1_1, x2_1, ...``).
* **input**: each span is tokenised without special tokens, truncated to ``max_length - 2`` and
  framed by the model's special tokens (``[CLS] x [SEP]`` / ``<s> x </s>``,
  :func:`~zsdr.pretrain.mlm.special_frame`).
* **masking**: whole words, as the official collator (``DataCollatorForWholeWordMask``, which the
  Condenser collator extends): the span's tokens are grouped into words by the fast tokenizer's
  ``word_ids()``; ``max(1, round(n · mlm_probability))`` of its ``n`` tokens are to be predicted;
  words are visited in a random order and taken whole while they fit in that budget (a word
  that would overshoot it is skipped). ``n`` counts the span's own tokens, not the special tokens
  around it: COCO-DR's ``CondenserCollator`` (``COCO/data.py``) hands ``_whole_word_mask`` the
  truncated span *before* ``encode_plus`` adds [CLS] / [SEP] (its mask gets a leading 0 for [CLS]
  afterwards). Hugging Face's own ``DataCollatorForWholeWordMask`` masks the framed sequence and so
  counts ``n + 2``: on a 30-token span at 15 % that is 5 tokens instead of the official 4. We follow
  the official collator, whose budget the paper's pretraining ran with. Each selected token then becomes the mask token (80 %), a
  random token (10 %) or stays (10 %), as BERT (:func:`~zsdr.pretrain.mlm.mask_tokens`). Masks
  are drawn from ``(seed, epoch, index, span slot)`` alone.
* **Condenser head**: ``head_layers`` transformer layers of the backbone's own layer class read
  the last layer's [CLS] state followed by the token states of hidden layer ``skip_from``
  (``hidden_states[skip_from]``: the output of layer ``skip_from``) at positions ``1..``; their
  output goes through the masked LM's own prediction head (``cls`` / ``lm_head``, shared) to
  give the head MLM loss. ``late_mlm`` adds the backbone's own MLM loss on its last layer.
* **contrastive**: the last layer's [CLS] vector of each span (same forward pass, masked input)
  in :func:`~zsdr.losses.coco.span_contrastive` against the spans of every process (dot
  product, no temperature, partner span as the target).
* ``loss = mlm_head + mlm_backbone (late_mlm) + contrastive_weight · contrastive``;
  ``contrastive_weight = 0`` is plain Condenser pretraining.
* ``backbone_dropout = False`` (the official default: its forward calls ``self.lm.eval()``) runs
  the backbone without dropout; the head keeps its dropout.

The saved folder is the masked LM and its tokenizer (``save_pretrained``: it loads with
``AutoModel`` / :meth:`zsdr.models.encoder.Encoder.from_pretrained` as a fine-tuning init) plus
the head in ``condenser_head.safetensors`` and ``condenser_head.json`` (``head_layers``,
``skip_from``). A task continues the head its ``init`` carries (that file, or the released
Condenser's ``model.pt``, for folders and hub ids alike: :func:`find_condenser_head`); a checkpoint
without one needs ``head: new``, and a head that does not fit is an error, never a silent restart.

:func:`contrastive_loss_on` measures the span-contrastive loss of any encoder folder on a corpus's
spans (no masking, fixed batches and pairs): the "COCO loss on a target corpus" before and after
pretraining.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch import nn

from zsdr.data.spans import SpanDocuments, SpanFile, open_spans, sample_pair, span_pair_texts
from zsdr.losses.coco import contrastive_of_vectors
from zsdr.models.inference import cls_vectors
from zsdr.pretrain.mlm import (IGNORE, head_split, mask_tokens, masked_lm_frame, masked_lm_of_spec, model_name,
                              pad_masked)

log = logging.getLogger(__name__)

HEAD_WEIGHTS = "condenser_head.safetensors"
HEAD_CONFIG = "condenser_head.json"
_WORD_STREAM = 2   # seeds the choice of whole words of a span
_MASK_STREAM = 3   # seeds the 80/10/10 replacement of its selected tokens


def whole_word_selection(word_ids: Sequence[int | None], probability: float, rng: np.random.Generator) -> list[int]:
    """Positions to predict, whole words at a time (``DataCollatorForWholeWordMask._whole_word_mask``).

    ``word_ids``: the word of each position (``None``: never selected, e.g. special tokens). The
    budget is ``max(1, round(n · probability))`` of the ``n`` word tokens (0 when ``probability``
    is 0), Python's round (half to even), as the official collator computes it over the span without
    its special tokens (see the module docstring);
    words are visited in a random order and taken while they fit in it. Returns sorted positions.
    """
    if not 0.0 <= probability <= 1.0:
        raise ValueError(f"mlm probability {probability} must lie in [0, 1]")
    groups: dict[int, list[int]] = {}
    for pos, word in enumerate(word_ids):
        if word is not None:
            groups.setdefault(word, []).append(pos)
    words = list(groups.values())
    if not words or probability == 0:
        return []
    budget = max(1, int(round(sum(len(w) for w in words) * probability)))
    chosen: list[int] = []
    for k in rng.permutation(len(words)):
        if len(chosen) >= budget:
            break
        if len(chosen) + len(words[k]) > budget:
            continue
        chosen.extend(words[k])
    return sorted(chosen)


def _stream_seed(seed: int, epoch: int, index: int, slot: int, stream: int) -> np.random.SeedSequence:
    return np.random.SeedSequence([int(seed), int(epoch), int(index), int(slot), stream])


def _layers_of(base: nn.Module, name: str) -> nn.ModuleList:
    layers = getattr(getattr(base, "encoder", None), "layer", None)
    if not isinstance(layers, nn.ModuleList) or len(layers) == 0:
        raise ValueError(f"{name}: {type(base).__name__} has no encoder.layer list; the Condenser head needs a "
                         "BERT- or RoBERTa-shaped model")
    return layers


def _layer_mask(base: nn.Module, hidden: torch.Tensor, attention_mask: torch.Tensor):
    """The attention mask in the form the backbone's layers take (what its own forward builds)."""
    try:
        from transformers.masking_utils import create_bidirectional_mask
    except ImportError:  # Transformers 4: the additive (b, 1, 1, n) mask
        return base.get_extended_attention_mask(attention_mask, attention_mask.shape)
    return create_bidirectional_mask(config=base.config, inputs_embeds=hidden, attention_mask=attention_mask)


def _run_layer(layer: nn.Module, hidden: torch.Tensor, mask) -> torch.Tensor:
    out = layer(hidden, mask)
    # Transformers 5's layers return the hidden states, Transformers 4's a tuple starting with them.
    return out[0] if isinstance(out, (tuple, list)) else out


class CocoTask(nn.Module):
    """COCO pretraining of ``model`` (an ``AutoModelForMaskedLM``) on ``documents`` (each a list of
    at least two spans: the mapped span files of :func:`zsdr.data.spans.open_spans`, read a document
    at a time, or lists) for the Trainer; see the module docstring."""

    def __init__(self, model: nn.Module, tokenizer, documents: Sequence[Sequence[str]], max_length: int = 128,
                 mlm_probability: float = 0.15, head_layers: int = 2, skip_from: int = 6, late_mlm: bool = True,
                 contrastive_weight: float = 1.0, backbone_dropout: bool = False, seed: int = 42,
                 name: str | None = None):
        super().__init__()
        name = model_name(model, name)
        self.prefix, self.suffix, self.content_length, self.vocab_size = masked_lm_frame(model, tokenizer,
                                                                                        max_length, name)
        # mapped span files are checked when opened (two spans a document) and read lazily
        mapped = isinstance(documents, (SpanFile, SpanDocuments))
        self.documents = documents if mapped else [list(spans) for spans in documents]
        if not len(self.documents):
            raise ValueError(f"{name}: no documents to pretrain on")
        short = None if mapped else next((i for i, spans in enumerate(self.documents) if len(spans) < 2), None)
        if short is not None:
            raise ValueError(f"document {short} has {len(self.documents[short])} span(s); every document needs two "
                             "(write the spans with zsdr.pretrain.spans.write_spans, which drops the others)")
        split = head_split(model)
        if split is None:
            raise ValueError(f"{name}: {type(model).__name__} is not a BERT-/RoBERTa-style masked LM with a base "
                             "model and a cls / lm_head prediction head")
        base, _ = split
        layers = _layers_of(base, name)
        n_layers = len(layers)
        if not 0 <= int(skip_from) <= n_layers:
            raise ValueError(f"skip_from {skip_from}: {name} has {n_layers} layers, so the Condenser head can read "
                             f"hidden layer 0..{n_layers} (set skip_from to at most {n_layers})")
        if int(head_layers) < 1:
            raise ValueError(f"head_layers {head_layers}: the Condenser head needs at least one layer")
        self.model = model
        self.tokenizer = tokenizer
        self.max_length = int(max_length)
        self.probability = float(mlm_probability)
        if not 0.0 <= self.probability <= 1.0:
            raise ValueError(f"mlm_probability {mlm_probability} must lie in [0, 1]")
        self.head_layers = int(head_layers)
        self.skip_from = int(skip_from)
        self.late_mlm = bool(late_mlm)
        self.contrastive_weight = float(contrastive_weight)
        self.backbone_dropout = bool(backbone_dropout)
        self.seed = int(seed)
        layer_class = type(layers[0])
        self.head = nn.ModuleList([layer_class(model.config) for _ in range(self.head_layers)])
        self._init_head()
        self.head_source: str | None = None  # the folder the head was loaded from (None: fresh)

    def _init_head(self) -> None:
        init = getattr(self.model, "_init_weights", None)
        if callable(init):
            self.head.apply(init)
            return
        std = float(getattr(self.model.config, "initializer_range", 0.02))
        for m in self.head.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0.0, std)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.LayerNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def load_head(self, name: str | os.PathLike, head: str | None = None) -> bool:
        """Start the head from the one checkpoint ``name`` (a folder or a hub id) carries
        (:func:`find_condenser_head`: ``condenser_head.safetensors`` of a pipeline folder, or the
        released Condenser's ``model.pt``). ``head``: ``None`` / ``"checkpoint"`` require it (DataError
        naming the files searched when there is none or it does not fit this model's head);
        ``"new"`` keeps the fresh head and refuses a checkpoint that carries one. Returns whether a
        head was loaded."""
        from zsdr.io import DataError

        if head not in (None, "checkpoint", "new"):
            raise ValueError(f"head must be checkpoint, new or None, got {head!r}")
        saved, where, skip = find_condenser_head(name)
        if head == "new":
            if saved is not None:
                raise DataError(where, None, f"{name} carries a Condenser head, which head 'new' would discard",
                                "use the checkpoint's head (`head: checkpoint`) or start from a plain backbone")
            log.info("Condenser head: new (%d layer(s), head: new)", self.head_layers)
            return False
        if saved is None:
            raise DataError(where, None, f"{name} carries no Condenser head ({HEAD_WEIGHTS} or model.pt's c_head), "
                            "so the head would start random", "pretrain from a checkpoint that has the head, or "
                            "start a new one on purpose with the pretrained model's `head: new`")
        own = self.head.state_dict()
        missing = sorted(set(own) - set(saved))
        extra = sorted(set(saved) - set(own))
        shapes = [k for k in own if k in saved and tuple(saved[k].shape) != tuple(own[k].shape)]
        if missing or extra or shapes:
            detail = (f"missing {missing[:3]}" if missing else f"unexpected {extra[:3]}" if extra
                      else f"shape of {shapes[0]} {tuple(saved[shapes[0]].shape)} vs {tuple(own[shapes[0]].shape)}")
            raise DataError(where, None, f"the Condenser head does not fit {self.head_layers} layer(s) of this "
                            f"model ({detail})", "set head_layers to the checkpoint's, or `head: new`")
        self.head.load_state_dict(saved)
        if skip is not None and int(skip) != self.skip_from:
            log.warning("Condenser head of %s was trained with skip_from %s, now %d", name, skip, self.skip_from)
        self.head_source = where
        log.info("Condenser head: continued from %s", where)
        return True

    @property
    def num_examples(self) -> int:
        return len(self.documents)

    def make_batch(self, indices: list[int], epoch: int) -> dict:
        tok = self.tokenizer
        texts = []
        for i in indices:
            spans = self.documents[i]
            a, b = sample_pair(len(spans), self.seed, epoch, i)
            texts += [spans[a], spans[b]]
        enc = tok(texts, add_special_tokens=False, truncation=True, max_length=self.content_length,
                  return_attention_mask=False, return_token_type_ids=False)
        start = len(self.prefix)
        rows_in, rows_lab = [], []
        for j in range(len(texts)):
            i, slot = indices[j // 2], j % 2
            ids = list(enc["input_ids"][j])
            row = torch.tensor(self.prefix + ids + self.suffix, dtype=torch.long)
            rng = np.random.default_rng(_stream_seed(self.seed, epoch, i, slot, _WORD_STREAM))
            chosen = whole_word_selection(enc.word_ids(j), self.probability, rng)
            selected = torch.zeros(len(row), dtype=torch.bool)
            selected[torch.tensor([start + p for p in chosen], dtype=torch.long)] = True
            gen = torch.Generator().manual_seed(
                int(_stream_seed(self.seed, epoch, i, slot, _MASK_STREAM).generate_state(1, dtype=np.uint64)[0]))
            inputs, labels = mask_tokens(row[None], ~selected[None], self.vocab_size, tok.mask_token_id, gen,
                                         probability=1.0)
            rows_in.append(inputs[0])
            rows_lab.append(labels[0])
        return pad_masked(rows_in, rows_lab, tok.pad_token_id)

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(last, head)``: the backbone's last hidden states and the Condenser head's output, both
        ``(n, length, hidden)``. The head reads the last layer's [CLS] state followed by
        ``hidden_states[skip_from]`` at positions ``1..``, under the batch's attention mask."""
        base, _ = head_split(self.model)
        # The official forward calls self.lm.eval(): no dropout in the backbone; the head keeps its own.
        self.model.train(self.training and self.backbone_dropout)
        out = base(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
        last = out.last_hidden_state
        hidden = torch.cat([last[:, :1], out.hidden_states[self.skip_from][:, 1:]], dim=1)
        mask = _layer_mask(base, hidden, attention_mask)
        for layer in self.head:
            hidden = _run_layer(layer, hidden, mask)
        return last, hidden

    def forward(self, batch: dict) -> tuple[torch.Tensor, dict]:
        from zsdr.losses.coco import span_logits

        _, lm_head = head_split(self.model)
        last, hidden = self.encode(batch["input_ids"], batch["attention_mask"])
        labels = batch["labels"]
        selected = labels != IGNORE
        targets = labels[selected]
        head_logits = lm_head(hidden[selected]).float()
        if targets.numel() == 0:
            # Nothing selected (every word of every span longer than its budget): a zero MLM loss whose graph
            # still reaches the head and the prediction layer, so backward and DDP's gradient sync run as usual.
            mlm_head = head_logits.sum() * 0.0
            mlm_backbone = lm_head(last[selected]).float().sum() * 0.0
        else:
            ce = nn.functional.cross_entropy
            mlm_head = ce(head_logits, targets)
            if self.late_mlm:
                mlm_backbone = ce(lm_head(last[selected]).float(), targets)
            else:
                with torch.no_grad():
                    mlm_backbone = ce(lm_head(last[selected]).float(), targets)
        cls = last[:, 0]
        logits, partners = span_logits(cls if self.contrastive_weight else cls.detach())
        contrastive = nn.functional.cross_entropy(logits, partners)
        loss = mlm_head
        if self.late_mlm:
            loss = loss + mlm_backbone
        if self.contrastive_weight:
            loss = loss + self.contrastive_weight * contrastive
        logs = {"mlm_head": mlm_head.detach(), "mlm_backbone": mlm_backbone.detach(),
                "contrastive": contrastive.detach(),
                "contrastive_accuracy": (logits.detach().argmax(dim=1) == partners).float().mean()}
        return loss, logs

    def save(self, directory: str | os.PathLike) -> Path:
        from safetensors.torch import save_file

        directory = Path(directory)
        self.model.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)
        save_file({k: v.detach().cpu().contiguous() for k, v in self.head.state_dict().items()},
                  str(directory / HEAD_WEIGHTS))
        (directory / HEAD_CONFIG).write_text(
            json.dumps({"head_layers": self.head_layers, "skip_from": self.skip_from}, indent=1) + "\n",
            encoding="utf-8")
        return directory


def find_condenser_head(name: str | os.PathLike) -> tuple[dict[str, torch.Tensor] | None, str, int | None]:
    """The Condenser head a checkpoint (a folder or a hub id) carries, as this module's head state dict
    (keys ``{layer}.{parameter}``): ``condenser_head.safetensors`` written by :meth:`CocoTask.save`, or
    the ``c_head.{layer}.*`` tensors of ``model.pt``, where the released Condenser / coCondenser
    checkpoints keep it beside the masked LM. Returns ``(state or None, where it was looked for,
    skip_from when recorded)``."""
    from zsdr.models.checkpoints import checkpoint_file, read_tensors

    own = checkpoint_file(name, HEAD_WEIGHTS)
    if own is not None:
        state = read_tensors([own], lambda k: True)
        settings = checkpoint_file(name, HEAD_CONFIG)
        skip = json.loads(settings.read_text(encoding="utf-8")).get("skip_from") if settings is not None else None
        return state, str(own), skip
    released = checkpoint_file(name, "model.pt")
    if released is not None:
        tensors = read_tensors([released], lambda k: k.startswith("c_head."))
        if tensors:
            return {k[len("c_head."):]: v for k, v in tensors.items()}, str(released), None
        return None, str(released), None
    return None, f"{name} ({HEAD_WEIGHTS}, model.pt)", None


def _span_files(spec: dict) -> list[str]:
    files = spec.get("spans")
    if isinstance(files, (str, os.PathLike)):
        files = [files]
    if not files:
        raise ValueError('the coco task needs "spans": a list of span files (one per corpus), written by '
                         "zsdr.pretrain.spans.write_spans")
    return [str(f) for f in files]


def build_coco_task(spec: dict) -> CocoTask:
    """The COCO task of a spec: ``init`` (masked-LM folder or Hugging Face id; a folder holding a
    ``condenser_head.safetensors`` of matching shape also gives the head), ``spans`` (span files,
    memory-mapped, their documents concatenated in this order), ``max_length`` (128), ``mlm_probability``
    (0.15), ``head_layers`` (2), ``skip_from`` (6), ``late_mlm`` (true), ``contrastive_weight`` (1.0;
    0: Condenser), ``backbone_dropout`` (false), ``max_examples`` (documents per file; null: all),
    ``dropout`` (null keeps the checkpoint's), ``tie_embeddings`` (null keeps the checkpoint's tied MLM
    output layer; false unties it, :func:`zsdr.pretrain.mlm.load_masked_lm`) and ``train.seed``."""
    seed, init, tokenizer, model = masked_lm_of_spec(spec)
    max_examples = spec.get("max_examples")
    documents = open_spans(_span_files(spec), None if max_examples is None else int(max_examples))
    if not len(documents):
        raise ValueError(f"no documents in {', '.join(_span_files(spec))}: every document of the corpus was dropped "
                         "(fewer than two spans) or the files are empty")
    task = CocoTask(model, tokenizer, documents, max_length=int(spec["max_length"]),
                    mlm_probability=float(spec["mlm_probability"]),
                    head_layers=int(spec["head_layers"]), skip_from=int(spec["skip_from"]),
                    late_mlm=bool(spec["late_mlm"]),
                    contrastive_weight=float(spec["contrastive_weight"]),
                    backbone_dropout=bool(spec["backbone_dropout"]), seed=seed, name=init)
    task.load_head(init, spec.get("head"))
    task.train()
    return task


@torch.no_grad()
def contrastive_loss_on(model_dir: str | os.PathLike, spans_path: str | os.PathLike, docs: int = 256,
                        batch_size: int = 64, seed: int = 0, max_length: int = 128,
                        device: str | torch.device | None = None) -> dict:
    """The span-contrastive loss of any encoder folder on the spans of a corpus (no masking).

    ``docs`` documents are taken in the order of a permutation seeded by ``seed`` (all of them
    when the file has fewer) and cut into consecutive batches of ``batch_size`` (a last, smaller
    batch is left out: the in-batch loss depends on the batch size; fewer documents than
    ``batch_size`` make one batch); document ``i`` contributes its pair of epoch 0
    (:func:`~zsdr.data.spans.sample_pair` with ``seed``). Each span is encoded by ``AutoModel`` in eval mode,
    ``[CLS] span [SEP]`` truncated to ``max_length`` (at most the tokenizer's ``model_max_length``),
    and represented by its last layer's first state, so the folder may be any backbone (loaded as
    the project's encoders load theirs, without pooler), with or without a Condenser head. Returns
    ``{"contrastive_loss", "contrastive_accuracy", "documents", "batch_size"}`` (means over
    batches of equal size).
    """
    vectors = span_pair_vectors(model_dir, spans_path, docs=docs, seed=seed, batch_size=batch_size,
                                max_length=max_length, device=device)
    return contrastive_of_vectors(vectors, batch_size, where=spans_path)


def span_pair_vectors(model_dir: str | os.PathLike, spans_path: str | os.PathLike, docs: int = 256, seed: int = 0,
                      batch_size: int = 64, max_length: int = 128, device=None) -> torch.Tensor:
    """``(2n, dim)`` float32 on the CPU, rows ``x1_0, x2_0, x1_1, ...``: the last-layer [CLS] vectors
    (:func:`zsdr.models.inference.cls_vectors`, ``2 batch_size`` spans at a time) of the two spans of
    epoch 0 of the first ``docs`` documents of a permutation seeded by ``seed``
    (:func:`zsdr.data.spans.span_pair_texts`)."""
    return cls_vectors(model_dir, span_pair_texts(spans_path, docs, seed), batch_size=2 * int(batch_size),
                       max_length=max_length, device=device)

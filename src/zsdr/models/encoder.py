"""A bi-encoder over a Hugging Face backbone: pooling, optional ANCE head, similarity, text formats.

:class:`~zsdr.models.settings.EncoderConfig` says how a text becomes a vector (which pooling, dot or
cosine, maximum lengths, prefixes, how a document's title and text are joined); :class:`Encoder` is a
plain ``torch.nn.Module`` (trainable: ``forward`` is differentiable) that also encodes lists of
queries and documents in length-bucketed batches for retrieval. Its concerns live in their own
modules, whose public names this module also offers:

* :mod:`zsdr.models.settings`: :class:`EncoderConfig` and :func:`resolve_settings`, where a loaded
  model's settings come from (defaults, sentence-transformers metadata, export metadata,
  ``zsdr.json``, the REM's settings, explicit overrides; that order of precedence);
* :mod:`zsdr.models.loading`: model folders, read (:func:`read_pretrained`: the checkpoint's parts,
  its ``cls_linear_ln`` head) and written (:func:`write_folder`);
* :mod:`zsdr.models.st_files`: sentence-transformers metadata, read and written;
* :mod:`zsdr.models.texts`: tokenisation and the document formats;
* :mod:`zsdr.models.inference`: devices, precision and the length-bucketed batches.

Any Hugging Face id or folder loads: a sentence-transformers checkpoint lends its pooling,
normalisation and maximum length as defaults, an ANCE checkpoint its ``embeddingHead`` + ``norm``
head; any other checkpoint needs its pooling and similarity said explicitly, and ``cls_linear_ln``
pooling on a checkpoint without a head needs ``head="new"`` (never a silent random head).

An encoder may carry DDR's Relevance Estimation Module (REM, :mod:`zsdr.models.adapters`): LoRA and
a parallel adapter over the frozen backbone (:meth:`Encoder.add_rem`). Its folder then holds the
bare backbone (the DAM) and the REM in ``rem/`` (``"rem": "rem"`` in ``zsdr.json``), which
:meth:`Encoder.from_pretrained` plugs back (merging LoRA into the weights for inference).

An encoder may also carry RMSC's soft tokens (:mod:`zsdr.models.soft_tokens`,
:meth:`Encoder.add_soft_tokens`): domain tokens right after the head special tokens and relevance
tokens right before the final one, ``[CLS] [T] x [H] [SEP]``. ``contexts`` of the tokenising and
encoding methods pick them per text (default: the inference context). The tokens live in the saved
tokenizer and the resized embeddings; ``zsdr.json`` names them (``soft_tokens``).
"""

from __future__ import annotations

import copy
import logging
import os
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn

from zsdr.io import DataError
from zsdr.models.adapters import Rem, RemConfig, attach_rem, load_rem, rem_settings, rem_with_adapters
from zsdr.models.heads import AnceHead
from zsdr.models.inference import (PREFETCH_CHUNK, Packed, autocast_dtype, embed_packed,
                                   encode_in_chunks, prefetched, resolve_device, run_in_length_chunks)
from zsdr.models.loading import (CONFIG_FILE, CONFIG_VERSION, HEAD_CHOICES, HEAD_FILE, REM_DIR, find_head,
                                 load_backbone, quiet_transformers, read_pretrained, set_dropout, write_folder)
from zsdr.models.settings import (DOC_FORMATS, POOLINGS, PRECISIONS, SIMILARITIES, EncoderConfig,
                                  normalise_overrides, resolve_settings)
from zsdr.models.soft_tokens import SoftTokens
from zsdr.models.st_files import sentence_transformers_settings
from zsdr.models.texts import TextTokenizer, soft_token_ids

# The public names of the encoder's concerns, importable from here as before they had modules of their own.
__all__ = [
    "AnceHead", "CONFIG_FILE", "CONFIG_VERSION", "DOC_FORMATS", "Encoder", "EncoderConfig", "HEAD_CHOICES",
    "HEAD_FILE", "PRECISIONS", "PREFETCH_CHUNK", "POOLINGS", "Packed", "REM_DIR", "SIMILARITIES",
    "TextTokenizer", "autocast_dtype", "find_head", "load_backbone", "load_encoder",
    "normalise_overrides", "prefetched", "quiet_transformers", "resolve_device", "resolve_settings",
    "sentence_transformers_settings", "set_dropout",
]

log = logging.getLogger(__name__)


class Encoder(nn.Module):
    """A backbone, a pooling (and optional head) and a tokenizer, configured by :class:`EncoderConfig`."""

    def __init__(self, backbone: nn.Module, tokenizer, config: EncoderConfig | None = None,
                 name_or_path: str | None = None, precision: str = "auto"):
        super().__init__()
        self.backbone = backbone
        self.tokenizer = tokenizer
        self.config = config or EncoderConfig()
        self.name_or_path = name_or_path
        if precision not in PRECISIONS:
            raise ValueError(f"unknown precision {precision!r} (expected one of {', '.join(PRECISIONS)})")
        self.precision = precision
        self.head: AnceHead | None = None
        self.head_source: str | None = None  # the file the head was loaded from (None: new or none)
        self.rem: Rem | None = None
        self.rem_source: str | None = None  # the folder the REM was loaded from (None: new or none)
        # settings the model's retrieval system encodes with over ``config`` (a recipe's `system:`;
        # ``zsdr.json``'s ``retrieval``): applied by from_pretrained, saved apart from the training settings
        self.retrieval: dict[str, Any] = {}
        self._trained: dict[str, Any] = {}  # training settings ``config`` holds the retrieval values of
        self._texts: TextTokenizer | None = None  # the tokenisation of the current settings
        self._soft_ids: tuple[SoftTokens, dict[str, int]] | None = None  # the settings and each token's id
        self._half: tuple | None = None  # (key, backbone, head): the half-precision inference copy on a GPU
        # CPU forwards of more padded tokens than this run in chunks of similar lengths (None: one pass); the
        # trainer sets it from the recipe's train.cpu_chunk_tokens
        self.chunk_tokens: int | None = None
        self._clamp_lengths()
        if self.config.soft_tokens is not None:
            self._soft()  # every soft token must be in the tokenizer and the embeddings
        if self.config.pooling == "cls_linear_ln":
            self.head = self._new_head()

    # -------------------------------------------------------------------------------- set-up
    @property
    def dim(self) -> int:
        cfg = getattr(self.backbone, "config", None)
        size = getattr(cfg, "hidden_size", None)
        return int(size) if size else int(self.backbone.get_input_embeddings().embedding_dim)

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def _new_head(self) -> AnceHead:
        std = float(getattr(getattr(self.backbone, "config", None), "initializer_range", 0.02) or 0.02)
        head = AnceHead(self.dim, seed=self.config.head_seed, init_std=std)
        return head.to(self.device)

    def _max_positions(self) -> int | None:
        cfg = getattr(self.backbone, "config", None)
        n = getattr(cfg, "max_position_embeddings", None)
        if not n:
            return None
        # RoBERTa-family position ids start after the padding index.
        if getattr(cfg, "model_type", "") in ("roberta", "xlm-roberta", "camembert", "longformer"):
            pad = getattr(cfg, "pad_token_id", None)
            n -= (1 if pad is None else pad) + 1
        return int(n)

    def _clamp_lengths(self) -> None:
        limits = [n for n in (self._max_positions(), getattr(self.tokenizer, "model_max_length", None))
                  if isinstance(n, int) and 2 <= n < 1_000_000]
        if not limits:
            return
        cap = min(limits)
        for name in ("query_max_length", "doc_max_length"):
            if getattr(self.config, name) > cap:
                log.info("%s %d exceeds the model's %d positions; using %d", name, getattr(self.config, name), cap, cap)
                self.config = replace(self.config, **{name: cap})

    def configure(self, **overrides) -> "Encoder":
        """Change settings in place (``max_length`` sets both lengths); a new ``cls_linear_ln`` gets a seeded head."""
        overrides = normalise_overrides(overrides)
        if not overrides:
            return self
        before = self.config
        self.config = replace(self.config, **overrides)
        if self.config.soft_tokens != before.soft_tokens:
            try:  # a different inference context is fine; tokens the model lacks are not added here
                self._soft()
            except ValueError as exc:
                self.config = before
                raise ValueError(f"{exc}; only Encoder.add_soft_tokens adds soft tokens") from None
        self._clamp_lengths()
        if self.config.pooling == "cls_linear_ln":
            if self.head is None:
                self.head = self._new_head()
                log.warning("%s: cls_linear_ln pooling set on a loaded encoder: its head is new (seed %d), not a "
                            "trained one", self.name_or_path, self.config.head_seed)
        else:
            self.head = None
        return self

    # --------------------------------------------------------------------------- soft tokens
    def add_soft_tokens(self, k: int = 1, seed: int = 0,
                        inference: tuple[str, str] = ("target", "human")) -> "Encoder":
        """Add RMSC's soft tokens (``k`` per slot: ``[S]`` ``[T]`` ``[H]`` ``[W]``) to the tokenizer and the
        backbone's input embeddings; ``inference`` is the (domain, relevance) context of inputs given none.

        The new embedding rows are drawn from N(0, ``initializer_range``) of the backbone config (0.02
        without one) with ``torch.Generator().manual_seed(seed)``: random, not the mean of the old rows,
        and the same for the same seed. Refused when the encoder already has soft tokens or when any
        token string already exists in the vocabulary.
        """
        if self.config.soft_tokens is not None:
            raise ValueError(f"this encoder already has soft tokens ({self.config.soft_tokens}); load the model "
                             "without them to add others")
        soft = SoftTokens(k=k, inference=tuple(inference))
        strings = soft.all_tokens()
        vocab = self.tokenizer.get_vocab()
        taken = [t for t in strings if t in vocab]
        if taken:
            raise ValueError(f"soft tokens {taken} already exist in the tokenizer's vocabulary; RMSC's tokens must be "
                             "new (load a model without them)")
        old = self.backbone.get_input_embeddings()
        trainable = old.weight.requires_grad
        self.tokenizer.add_tokens(strings, special_tokens=True)
        ids = self.tokenizer.convert_tokens_to_ids(strings)
        # Never shrink: some checkpoints have more embedding rows than tokenizer entries.
        rows = max(len(self.tokenizer), old.num_embeddings, max(ids) + 1)
        with quiet_transformers():
            emb = self.backbone.resize_token_embeddings(rows, mean_resizing=False)
        std = float(getattr(getattr(self.backbone, "config", None), "initializer_range", 0.02) or 0.02)
        generator = torch.Generator().manual_seed(int(seed))
        init = torch.randn(len(ids), emb.embedding_dim, generator=generator) * std
        with torch.no_grad():
            emb.weight[torch.tensor(ids)] = init.to(device=emb.weight.device, dtype=emb.weight.dtype)
        emb.weight.requires_grad_(trainable)
        self.config = replace(self.config, soft_tokens=soft.to_dict())
        self._soft_ids = None
        self._soft()
        return self

    def _soft(self) -> tuple[SoftTokens, dict[str, int]] | None:
        """The soft tokens' settings and each token string's id (``None`` without soft tokens); ValueError
        when a token is missing from the tokenizer or the embeddings."""
        soft = self.config.soft
        if soft is None:
            return None
        if self._soft_ids is None or self._soft_ids[0] != soft:
            self._soft_ids = (soft, soft_token_ids(self.tokenizer, self.backbone.get_input_embeddings().num_embeddings,
                                                        soft))
        return self._soft_ids

    @property
    def texts(self) -> TextTokenizer:
        """The tokenisation of the current settings, tokenizer and soft tokens (:mod:`zsdr.models.texts`)."""
        found = self._soft()
        ids = None if found is None else found[1]
        t = self._texts
        if t is None or t.config is not self.config or t.tokenizer is not self.tokenizer or t.soft_ids is not ids:
            t = self._texts = TextTokenizer(self.tokenizer, self.config, ids)
        return t

    # ------------------------------------------------------------------------------- the REM
    def add_rem(self, config: RemConfig | dict) -> "Encoder":
        """Freeze everything (backbone and head) and attach a new REM; only its parameters train.

        Freshly attached, the REM changes nothing (LoRA ``B`` and the adapters' up-projections are 0).
        """
        self._check_no_rem()
        self._install_rem(attach_rem, rem_settings(config))
        return self

    def load_rem(self, path: str | os.PathLike, merge: bool = True) -> "Encoder":
        """Plug a saved REM into this encoder's backbone; ``merge`` merges LoRA for inference, else
        the REM stays unmerged and trainable."""
        self._check_no_rem()
        self._install_rem(load_rem, path, trainable=not merge)
        self.rem_source = str(path)
        if merge:
            self.rem.merge()
        return self

    def merge_rem(self) -> "Encoder":
        """Merge the REM's LoRA into the backbone weights (inference; the encoder can no longer be saved)."""
        if self.rem is None:
            raise ValueError("this encoder has no REM to merge")
        self.rem.merge()
        return self

    def _check_no_rem(self) -> None:
        if self.rem is not None:
            raise ValueError("this encoder already has a REM; load the bare backbone to attach another")

    def _install_rem(self, make, *args, **kwargs) -> None:
        """Attach the REM ``make(backbone, ...)`` returns; everything else in the encoder is frozen."""
        device = self.device
        rem = make(self.backbone, *args, **kwargs).to(device)
        ours = {id(p) for _, p in rem.named_rem_parameters()}
        for p in self.parameters():
            if id(p) not in ours:
                p.requires_grad_(False)
        self.rem = rem

    @classmethod
    def from_pretrained(cls, name_or_path: str | os.PathLike, *, device: str | torch.device | None = None,
                        precision: str = "auto", rem: str | os.PathLike | bool | None = None,
                        merge_rem: bool = True, head: str | None = None, retrieval: bool = True,
                        trust_remote_code: bool = False, **overrides) -> "Encoder":
        """Load a backbone + tokenizer (HF id or folder); ``zsdr.json`` settings apply, ``overrides`` win.

        ``overrides`` are :class:`EncoderConfig` fields (``None`` values are ignored) plus
        ``max_length`` for both lengths. ``device=None`` keeps the model on the CPU until it encodes.
        ``rem`` is a REM folder to plug into the loaded backbone (default: the one ``zsdr.json``
        names, if any; ``False``: none, the bare DAM). ``merge_rem`` merges its LoRA into the
        weights (inference); ``False`` keeps it unmerged and trainable.

        Settings come from :func:`~zsdr.models.settings.resolve_settings` (its docstring gives the
        precedence): ``zsdr.json``, else a sentence-transformers configuration (hub ids too); a REM's
        ``rem.json`` settings (those it was trained under) take precedence over both, so a bare DAM
        with a REM encodes as the REM was trained; ``overrides`` win over all; a checkpoint with
        neither file must be given ``pooling`` and ``similarity`` explicitly (DataError otherwise:
        settings are never guessed).

        ``head`` (``cls_linear_ln`` pooling): ``None`` or ``"checkpoint"`` take the head the checkpoint
        carries (:func:`find_head`) and fail, naming the files searched, when it carries none;
        ``"new"`` starts a seeded head (``head_seed``) on a checkpoint that has none, such as a plain
        backbone a recipe fine-tunes, and fails when the checkpoint carries one.

        ``retrieval``: apply ``zsdr.json``'s ``retrieval`` settings (those the model's retrieval system
        encodes with, e.g. a longer document length than it trained at); ``False`` loads the training
        settings (a recipe continuing from the model). They are kept either way and saved again.

        A folder ``zsdr export`` wrote loads with its ``zsdr_export.json`` settings, its REM's parallel
        adapter rebuilt by zsdr (the folder's code never runs). ``trust_remote_code``: run the code of
        any other checkpoint whose config asks for it (refused otherwise, never asked on stdin).
        """
        parts = read_pretrained(name_or_path, rem=rem, head=head, retrieval=retrieval,
                                overrides=normalise_overrides(overrides), trust_remote_code=trust_remote_code)
        encoder = cls(parts.backbone, parts.tokenizer, parts.settings.config, name_or_path=parts.name,
                      precision=precision)
        encoder.retrieval = dict(parts.settings.retrieval)
        encoder._trained = dict(parts.settings.trained)
        encoder.head_source = None
        if encoder.head is not None:
            if parts.head_state is not None:
                try:
                    encoder.head.load_state_dict(parts.head_state)
                except RuntimeError as exc:
                    raise DataError(parts.head_source, None, f"head weights do not fit the backbone ({exc})",
                                    "load the checkpoint the head was trained with") from None
                encoder.head_source = parts.head_source
                log.info("%s: cls_linear_ln head from %s", parts.name, parts.head_source)
            else:
                log.info("%s: new cls_linear_ln head from seed %d (head='new')", parts.name,
                         encoder.config.head_seed)
        if parts.rem_path is not None:
            encoder.load_rem(parts.rem_path, merge=merge_rem)
        if parts.exported_rem is not None:  # LoRA is merged in the export's weights: its adapter alone
            encoder._install_rem(rem_with_adapters, *parts.exported_rem, parts.name)
            encoder.rem_source = parts.name
        encoder.eval()
        if device is not None:
            encoder.to(resolve_device(device))
        return encoder

    def save_pretrained(self, directory: str | os.PathLike) -> Path:
        """Write backbone, tokenizer, ``zsdr.json`` (and ``head.safetensors``) to ``directory`` atomically,
        with sentence-transformers metadata where the folder's weights and tokenizer encode as this
        encoder does under sentence-transformers (:mod:`zsdr.models.export`).

        With a REM the backbone is written bare (the DAM's own weights and keys) and the REM goes
        to ``rem/``; an encoder whose LoRA was merged cannot be saved (the DAM is gone).
        """
        if self.rem is not None and self.rem.lora_merged:
            raise ValueError("this encoder's REM LoRA is merged into the backbone weights, so the DAM and the REM can "
                             "no longer be saved apart; load it with merge_rem=False to save it")
        trained = {k: v for k, v in self._trained.items() if getattr(self.config, k) == self.retrieval.get(k)}
        settings = {"version": CONFIG_VERSION, **self.config.to_dict(), **trained, "backbone": self.name_or_path}
        if self.rem is not None:
            settings["rem"] = REM_DIR
        if self.retrieval:
            settings["retrieval"] = dict(self.retrieval)
        return write_folder(directory, backbone=self.backbone, tokenizer=self.tokenizer, settings=settings,
                            config=self.config, retrieval_config=self.retrieval_config(), dim=self.dim,
                            head=self.head, rem=self.rem)

    def retrieval_config(self) -> EncoderConfig:
        """The settings the model's retrieval system encodes with: ``config`` and the ``retrieval`` ones."""
        return replace(self.config, **self.retrieval) if self.retrieval else self.config

    # ------------------------------------------------------------------------------ forward
    def pool(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Pooled (and, for cosine, L2-normalised) vectors from the last hidden states."""
        return self._pool(hidden, attention_mask, self.head)

    def _pool(self, hidden: torch.Tensor, attention_mask: torch.Tensor, head: nn.Module | None) -> torch.Tensor:
        if self.config.pooling == "mean":
            skip = self.config.pool_skip
            if skip:
                hidden, attention_mask = hidden[:, skip:], attention_mask[:, skip:]
            mask = attention_mask.unsqueeze(-1).float()
            pooled = (hidden.float() * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        else:
            pooled = hidden[:, 0]
        if head is not None:
            pooled = head(pooled)
        pooled = pooled.float()
        if self.config.normalize:
            pooled = nn.functional.normalize(pooled, p=2, dim=-1)
        return pooled

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None,
                return_hidden: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Pooled vectors; with ``return_hidden`` also the last-layer token states (BERM's units). A batch on
        the CPU of more than :attr:`chunk_tokens` padded tokens runs in chunks of similar lengths
        (:func:`~zsdr.models.inference.run_in_length_chunks`; the token states come back padded to the batch's
        width)."""
        kwargs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:
            kwargs["token_type_ids"] = token_type_ids
        chunk = self.chunk_tokens if input_ids.device.type == "cpu" else None
        return run_in_length_chunks(partial(self._forward, return_hidden=return_hidden), kwargs, chunk,
                                    token_outputs=(1,) if return_hidden else ())

    def _forward(self, return_hidden: bool = False, **kwargs) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        hidden = self.backbone(**kwargs).last_hidden_state
        pooled = self.pool(hidden, kwargs["attention_mask"])
        return (pooled, hidden) if return_hidden else pooled

    # ---------------------------------------------------------------------------- tokenising
    def tokenize_queries(self, texts: Sequence[str], contexts=None,
                         max_length: int | None = None) -> dict[str, list[list[int]]]:
        """Token ids (and token types) of queries (:meth:`TextTokenizer.tokenize_queries
        <zsdr.models.texts.TextTokenizer.tokenize_queries>`). ``contexts`` (encoders with soft tokens
        only): ``None`` for the inference context, one ``(domain, relevance)`` pair for all, or one pair
        per text. ``max_length``: another length than ``query_max_length`` (MoDIR's target queries), at
        most the model's."""
        length = self.config.query_max_length if max_length is None else int(max_length)
        limit = self._max_positions()
        return self.texts.tokenize_queries(texts, contexts=contexts, max_length=min(length, limit) if limit else length)

    def tokenize_docs(self, docs: Sequence[dict | str], offsets: bool = False,
                      contexts=None) -> dict[str, list[list[int]]]:
        """Token ids of documents in the ``doc_format`` (:meth:`TextTokenizer.tokenize_docs
        <zsdr.models.texts.TextTokenizer.tokenize_docs>`: ``offsets`` adds each token's character
        span and sequence id); ``contexts`` as in :meth:`tokenize_queries`."""
        return self.texts.tokenize_docs(docs, offsets=offsets, contexts=contexts)

    # ------------------------------------------------------------------------------ encoding
    def pack(self, features: "dict[str, list[list[int]]] | Packed") -> "Packed":
        """Tokenised ``features`` as flat arrays (:class:`Packed`), the form :meth:`collate` and
        :meth:`encode_tokenized` pad from; a :class:`Packed` comes back as it is."""
        return features if isinstance(features, Packed) else Packed.of(features)

    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0

    def collate(self, features: "dict[str, list[list[int]]] | Packed",
                rows: Sequence[int] | None = None) -> dict[str, torch.Tensor]:
        """Right-padded ``input_ids``, ``attention_mask`` (and ``token_type_ids``) CPU tensors of
        tokenised ``features`` (``rows`` picks and orders a subset), ready for :meth:`forward`."""
        if isinstance(features, Packed):
            packed = features
        elif rows is None:
            packed = Packed.of(features)
        else:  # pack only the rows asked for
            rows = list(rows)
            packed = Packed.of({k: [features[k][i] for i in rows] for k in ("input_ids", "token_type_ids")
                                if features.get(k) is not None})
            rows = None
        return {k: torch.from_numpy(v) for k, v in packed.pad(rows, self.pad_id).items()}

    def encode_tokenized(self, features: "dict[str, list[list[int]]] | Packed", batch_size: int = 64,
                         device: str | torch.device | None = None, precision: str | None = None,
                         show_progress: bool = False, desc: str = "encode",
                         max_tokens: int | None = None) -> np.ndarray:
        """Embed pre-tokenised inputs in length-bucketed batches; rows come back in input order (float32).

        Texts are sorted by length (longest first) and cut into batches by a token budget: a batch
        holds at most ``max_tokens`` tokens, padding included (default: ``batch_size`` times the
        longest text of the call). The first batch therefore holds ``batch_size`` texts, as a
        count-based batch would, and batches of shorter texts hold more, so memory peaks where it
        did and the GPU sees full batches all the way down the length distribution. On a GPU with
        fp16 / bf16 precision the encoder runs a half-precision copy of its weights (made once and
        kept until the weights change, :meth:`release_inference_copy` frees it; an encoder in
        training mode frees it at the end of the call); batches are padded
        on the CPU while the GPU runs the previous one (pinned memory, asynchronous copies, one
        synchronisation per call). On the CPU everything stays float32.
        """
        packed = self.pack(features)
        n = len(packed)
        if n == 0:
            return np.empty((0, self.dim), dtype=np.float32)
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if max_tokens is not None and max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
        target = self._target_device(device)
        if self.device != target:
            self.to(target)
        half = autocast_dtype(target, precision or self.precision)
        budget = max_tokens or batch_size * max(int(packed.lengths.max()), 1)
        was_training = self.training
        self.eval()
        try:
            backbone, head = self._inference_modules(half)
            return embed_packed(packed, lambda batch: self._embed(backbone, head, batch), dim=self.dim,
                                target=target, pad_id=self.pad_id, budget=budget, show_progress=show_progress,
                                desc=desc)
        finally:
            self.train(was_training)
            if was_training:  # an encoder in training (mining between episodes): its weights move on
                self.release_inference_copy()

    def _embed(self, backbone: nn.Module, head: nn.Module | None, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """:meth:`forward` with the given backbone and head (the encoder's own or its inference copy)."""
        hidden = backbone(**batch).last_hidden_state
        return self._pool(hidden, batch["attention_mask"], head)

    def _inference_modules(self, dtype: torch.dtype | None) -> tuple[nn.Module, nn.Module | None]:
        """The backbone and head to encode with: the encoder's own (``dtype`` None: float32), else a copy
        cast to ``dtype``, kept while every parameter is the same tensor at the same version (any
        in-place update, such as an optimiser step or ``load_state_dict``, makes a new copy)."""
        if dtype is None:
            return self.backbone, self.head
        key = (dtype, tuple((p.data_ptr(), p._version) for p in self.parameters()))
        if self._half is None or self._half[0] != key:
            self._half = None  # free the stale copy first
            with torch.no_grad():
                backbone = copy.deepcopy(self.backbone).to(dtype).requires_grad_(False).eval()
                head = None if self.head is None else copy.deepcopy(self.head).to(dtype).requires_grad_(False).eval()
            self._half = (key, backbone, head)
        return self._half[1], self._half[2]

    def release_inference_copy(self) -> None:
        """Free the half-precision copy of the weights :meth:`encode_tokenized` keeps on a GPU."""
        self._half = None

    def _target_device(self, device) -> torch.device:
        if device is not None:
            return resolve_device(device)
        current = self.device
        return current if current.type != "cpu" else resolve_device(None)

    def encode_queries(self, texts: Sequence[str], batch_size: int = 64, device: str | torch.device | None = None,
                       show_progress: bool = False, precision: str | None = None, contexts=None) -> np.ndarray:
        """``(len(texts), dim)`` float32 query embeddings (``contexts`` as in :meth:`tokenize_queries`)."""
        return self.encode_tokenized(self.tokenize_queries(list(texts), contexts=contexts), batch_size, device,
                                     precision, show_progress, desc="queries")

    def encode_docs(self, docs: Sequence[dict | str], batch_size: int = 64, device: str | torch.device | None = None,
                    show_progress: bool = False, precision: str | None = None, contexts=None,
                    chunk_size: int = PREFETCH_CHUNK) -> np.ndarray:
        """``(len(docs), dim)`` float32 embeddings of ``{"title", "text"}`` dicts (or bare strings);
        ``contexts`` as in :meth:`tokenize_queries`. On a GPU, more than ``chunk_size`` documents are
        tokenised ``chunk_size`` at a time in a worker thread while the GPU encodes the previous chunk;
        on the CPU they are tokenised at once, in this thread."""
        docs = list(docs)
        if self._target_device(device).type != "cuda" or len(docs) <= chunk_size:
            return self.encode_tokenized(self.tokenize_docs(docs, contexts=contexts), batch_size, device,
                                         precision, show_progress, desc="docs")
        return encode_in_chunks(
            docs, contexts, chunk_size, lambda part, ctx: self.tokenize_docs(part, contexts=ctx),
            lambda packed: self.encode_tokenized(packed, batch_size, device, precision, show_progress, desc="docs"))

    def describe(self) -> dict:
        out = {"model": self.name_or_path, "dim": self.dim, **self.config.to_dict(), "normalize": self.config.normalize}
        soft = self.config.soft
        if soft is not None:
            out["soft_tokens"] = {**soft.to_dict(), "tokens": soft.all_tokens()}
        if self.rem is not None:
            out["rem"] = self.rem.describe()
        return out


def load_encoder(model: "str | os.PathLike | Encoder", device=None, precision: str | None = None,
                 rem: str | os.PathLike | bool | None = None, merge_rem: bool = True, trust_remote_code: bool = False,
                 **overrides) -> Encoder:
    """``model`` itself when it is an :class:`Encoder` (no overrides allowed), else ``Encoder.from_pretrained``
    (``rem`` / ``merge_rem`` / ``trust_remote_code`` as there)."""
    if isinstance(model, Encoder):
        if normalise_overrides(overrides):
            raise ValueError("encoder settings cannot be overridden on an Encoder instance; call encoder.configure()")
        if rem is not None and rem is not False:
            raise ValueError("a REM cannot be plugged into an Encoder instance here; call encoder.load_rem()")
        if precision is not None:
            model.precision = precision
        return model
    return Encoder.from_pretrained(model, device=device, precision=precision or "auto", rem=rem,
                                   merge_rem=merge_rem, trust_remote_code=trust_remote_code, **overrides)

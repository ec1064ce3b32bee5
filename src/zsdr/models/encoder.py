"""A bi-encoder over a Hugging Face backbone: pooling, optional ANCE head, similarity, text formats.

:class:`EncoderConfig` says how a text becomes a vector (which pooling, dot or cosine, maximum
lengths, prefixes, how a document's title and text are joined); :class:`Encoder` is a plain
``torch.nn.Module`` (trainable: ``forward`` is differentiable) that also encodes lists of
queries and documents in length-bucketed batches for retrieval.

A model folder written by :meth:`Encoder.save_pretrained` holds the backbone and tokenizer
(``save_pretrained`` of each), ``zsdr.json`` (the :class:`EncoderConfig`) and, for the
``cls_linear_ln`` pooling, ``head.safetensors``. Any Hugging Face id or folder loads too
(:mod:`zsdr.models.checkpoints` finds a hub id's files in the Hugging Face cache, offline too): a
sentence-transformers checkpoint lends its pooling, normalisation and maximum length as defaults,
an ANCE checkpoint its ``embeddingHead`` + ``norm`` head (``pytorch_model.bin`` or
``model.safetensors``); any other checkpoint needs its pooling and similarity said explicitly, and
``cls_linear_ln`` pooling on a checkpoint without a head needs ``head="new"`` (never a silent
random head).

An encoder may carry DDR's Relevance Estimation Module (REM, :mod:`zsdr.models.adapters`): LoRA and
a parallel adapter over the frozen backbone (:meth:`Encoder.add_rem`). Its folder then holds the
bare backbone (the DAM) and the REM in ``rem/`` (``"rem": "rem"`` in ``zsdr.json``), which
:meth:`Encoder.from_pretrained` plugs back (merging LoRA into the weights for inference).

An encoder may also carry RMSC's soft tokens (:mod:`zsdr.models.soft_tokens`,
:meth:`Encoder.add_soft_tokens`): domain tokens right after the head special tokens and relevance
tokens right before the final one, ``[CLS] [T] x [H] [SEP]``. ``contexts`` of the tokenising and
encoding methods pick them per text (default: the inference context). The tokens live in the saved
tokenizer and the resized embeddings; ``zsdr.json`` names them (``soft_tokens``).

Document formats (``doc_format``):

* ``title_space_text``: ``(title + " " + text).strip()``, the BEIR / MTEB sentence-transformers
  convention;
* ``title_sep_text``: title and text as a tokenizer pair (``[CLS] title [SEP] text [SEP]``);
* ``lower_title_text``: the lower-cased title's tokens directly followed by the text's tokens, no
  separator (COCO-DR);
* ``text``: the text alone.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import logging
import os
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import torch
from torch import nn

from zsdr.io import DataError, atomic_dir, read_json
from zsdr.models.export import st_blocker, write_st_metadata
from zsdr.models.checkpoints import checkpoint_file, hub_offline, is_local, read_tensors, weights_location
from zsdr.models.adapters import (Rem, RemConfig, attach_rem, bare_state_dict, load_rem, rem_encoder_settings,
                                  rem_settings)
from zsdr.models.soft_tokens import SoftTokens

log = logging.getLogger(__name__)

POOLINGS = ("cls", "mean", "cls_linear_ln")
SIMILARITIES = ("dot", "cosine")
DOC_FORMATS = ("title_space_text", "title_sep_text", "lower_title_text", "text")
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
CONFIG_FILE = "zsdr.json"
HEAD_FILE = "head.safetensors"
CONFIG_VERSION = 1
REM_DIR = "rem"
_REWRITE = "write the file again (save the model with save_pretrained)"
_SOFT_FIX = ("load the folder Encoder.save_pretrained wrote with the soft tokens (its tokenizer and weights carry them), "
             "or add them to the bare model with Encoder.add_soft_tokens")


@dataclass
class EncoderConfig:
    """How texts become vectors. ``normalize`` (L2 before the inner product) follows ``similarity``."""

    pooling: str = "cls"
    similarity: str = "dot"
    query_max_length: int = 64
    doc_max_length: int = 256
    query_prefix: str = ""
    doc_prefix: str = ""
    doc_format: str = "title_space_text"
    head_seed: int = 0  # initialises the cls_linear_ln head when the checkpoint has none
    soft_tokens: dict | None = None  # RMSC's soft tokens (SoftTokens.to_dict()); added by Encoder.add_soft_tokens
    # TCT-ColBERT's input convention (pyserini's TctColBert encoders): the markers are written in the
    # prefixes ("[CLS] [Q] " / "[CLS] [D] "), the tokenizer adds no special tokens of its own, mean
    # pooling leaves out the marker positions, and every query is filled to its maximum length with
    # attended [MASK] tokens.
    special_tokens: bool = True  # the tokenizer's own special tokens ([CLS] ... [SEP])
    pool_skip: int = 0           # mean pooling starts after this many leading positions
    query_fill: str = ""         # a token appended to every query up to query_max_length ("" = none)

    def __post_init__(self):
        for name, value, allowed in (("pooling", self.pooling, POOLINGS), ("similarity", self.similarity, SIMILARITIES),
                                     ("doc_format", self.doc_format, DOC_FORMATS)):
            if value not in allowed:
                raise ValueError(f"unknown {name} {value!r} (expected one of {', '.join(allowed)})")
        for name in ("query_max_length", "doc_max_length"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 2:
                raise ValueError(f"{name} must be an integer >= 2, got {value!r}")
        for name in ("query_prefix", "doc_prefix"):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"{name} must be a string")
        if not isinstance(self.special_tokens, bool):
            raise ValueError(f"special_tokens must be true or false, got {self.special_tokens!r}")
        if isinstance(self.pool_skip, bool) or not isinstance(self.pool_skip, int) or self.pool_skip < 0:
            raise ValueError(f"pool_skip must be an integer >= 0, got {self.pool_skip!r}")
        if self.pool_skip and self.pooling != "mean":
            raise ValueError(f"pool_skip applies to mean pooling, not {self.pooling}")
        if not isinstance(self.query_fill, str):
            raise ValueError("query_fill must be a token string ('' for none)")
        if self.soft_tokens is not None:  # canonical form; raises DataError (a ValueError) when invalid
            if not self.special_tokens:
                raise ValueError("soft tokens sit next to the tokenizer's special tokens: they need special_tokens true")
            self.soft_tokens = SoftTokens.from_dict(self.soft_tokens).to_dict()

    @property
    def soft(self) -> SoftTokens | None:
        """The soft tokens' settings, or ``None``."""
        return None if self.soft_tokens is None else SoftTokens.from_dict(self.soft_tokens)

    @property
    def normalize(self) -> bool:
        return self.similarity == "cosine"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def from_dict(cls, data: dict, path: str | os.PathLike | None = None) -> "EncoderConfig":
        known = set(cls.field_names())
        unknown = sorted(set(data) - known - {"version", "backbone", "rem", "retrieval"})
        if unknown:
            raise DataError(path, None, f"unknown encoder settings {unknown}", f"known: {', '.join(sorted(known))}")
        try:
            return cls(**{k: v for k, v in data.items() if k in known})
        except DataError as exc:  # the soft tokens' own message and fix
            raise DataError(path, None, exc.message, exc.fix) from None
        except ValueError as exc:
            raise DataError(path, None, str(exc), "fix the encoder settings") from None


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """``device`` as a ``torch.device``; ``None`` picks CUDA when available, else the CPU."""
    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def autocast_dtype(device: torch.device, precision: str) -> torch.dtype | None:
    """The autocast dtype for ``precision`` on ``device``: ``None`` means full fp32 (always on the CPU)."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r} (expected one of {', '.join(PRECISIONS)})")
    if device.type != "cuda" or precision == "fp32":
        return None
    if precision == "auto":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.bfloat16 if precision == "bf16" else torch.float16


@dataclass(eq=False)
class Packed:
    """Tokenised texts as flat arrays: every row's ids one after the other (``ids``, int64, and
    ``types`` for token types, or ``None``), with each row's ``starts`` and ``lengths``. Padding a
    batch of any rows is then a handful of numpy operations (:meth:`pad`), with no loop over rows."""

    ids: np.ndarray
    types: np.ndarray | None
    starts: np.ndarray
    lengths: np.ndarray

    @classmethod
    def of(cls, features: dict[str, list[list[int]]]) -> "Packed":
        rows = features["input_ids"]
        lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
        total = int(lengths.sum())
        ids = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64, count=total)
        types = features.get("token_type_ids")
        if types is not None:
            types = np.fromiter(itertools.chain.from_iterable(types), dtype=np.int64, count=total)
        starts = np.zeros_like(lengths)
        if len(lengths) > 1:
            np.cumsum(lengths[:-1], out=starts[1:])
        return cls(ids, types, starts, lengths)

    def __len__(self) -> int:
        return len(self.lengths)

    def __eq__(self, other) -> bool:
        if not isinstance(other, Packed) or (self.types is None) != (other.types is None):
            return NotImplemented if not isinstance(other, Packed) else False
        return all(np.array_equal(a, b) for a, b in zip((self.ids, self.types, self.starts, self.lengths),
                                                        (other.ids, other.types, other.starts, other.lengths)))

    def pad(self, rows: Sequence[int] | np.ndarray | None, pad_id: int) -> dict[str, np.ndarray]:
        """``input_ids`` (``pad_id`` after each row's end), ``attention_mask`` (and ``token_type_ids``,
        0 after the end) of ``rows`` (default: all, in order), right-padded to the longest of them."""
        rows = np.arange(len(self)) if rows is None else np.asarray(rows, dtype=np.int64)
        if len(rows) == 0:
            raise ValueError("no rows to pad")
        lengths = self.lengths[rows]
        width = int(lengths.max())
        mask = np.arange(width)[None, :] < lengths[:, None]
        out = {"input_ids": np.full((len(rows), width), pad_id, dtype=np.int64),
               "attention_mask": mask.astype(np.int64)}
        take = (self.starts[rows][:, None] + np.arange(width)[None, :])[mask]
        out["input_ids"][mask] = self.ids[take]
        if self.types is not None:
            out["token_type_ids"] = np.zeros((len(rows), width), dtype=np.int64)
            out["token_type_ids"][mask] = self.types[take]
        return out


PREFETCH_CHUNK = 16_384  # documents tokenised ahead of the GPU at a time (Encoder.encode_docs)


def prefetched(items: Iterator[Any]) -> Iterator[Any]:
    """The items of a lazy iterator, each computed in a worker thread while the caller works on the
    previous one (the tokenizer and numpy release the GIL for most of their work)."""
    from concurrent.futures import ThreadPoolExecutor

    items = iter(items)
    done = object()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="prefetch") as pool:
        pending = pool.submit(next, items, done)
        while (ready := pending.result()) is not done:
            pending = pool.submit(next, items, done)
            yield ready


def batch_bounds(sorted_lengths: np.ndarray, max_tokens: int) -> list[tuple[int, int]]:
    """``(start, stop)`` of consecutive batches of texts sorted longest first, each holding at most
    ``max_tokens`` tokens once padded to its first (longest) text, and at least one text."""
    out = []
    start, n = 0, len(sorted_lengths)
    while start < n:
        width = max(int(sorted_lengths[start]), 1)
        stop = min(n, start + max(max_tokens // width, 1))
        out.append((start, stop))
        start = stop
    return out


class AnceHead(nn.Module):
    """ANCE's projection: ``LayerNorm(W h + b)`` with a square ``W``."""

    def __init__(self, dim: int, seed: int = 0, init_std: float = 0.02, eps: float = 1e-5):
        super().__init__()
        self.linear = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim, eps=eps)
        generator = torch.Generator().manual_seed(int(seed))
        with torch.no_grad():
            self.linear.weight.copy_(torch.randn(dim, dim, generator=generator) * init_std)
            self.linear.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.linear(x))


# sentence-transformers' Pooling modes and the pooling each means here (the others have no equivalent).
_ST_POOLING = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean"}
# Modules that change nothing an Encoder computes: the transformer itself and the L2 normalisation.
_ST_MODULES = (".Transformer", ".Pooling", ".Normalize")


def sentence_transformers_settings(name: str | os.PathLike) -> dict:
    """Pooling / similarity / max length of a sentence-transformers checkpoint (a folder or a hub id);
    empty for other checkpoints. A module or pooling mode an :class:`Encoder` cannot reproduce (a Dense
    projection, max pooling, ...) is an error naming ``modules.json``, never a silent approximation."""
    modules_file = checkpoint_file(name, "modules.json")
    if modules_file is None:
        return {}
    out: dict[str, Any] = {}
    modules = read_json(modules_file, _REWRITE, expect=list)
    kinds = [str(m.get("type", "")) for m in modules if isinstance(m, dict)]
    foreign = [k for k in kinds if not k.endswith(_ST_MODULES)]
    if foreign:
        raise DataError(modules_file, None, f"sentence-transformers modules {foreign} have no equivalent in zsdr's "
                        "encoder (it pools and normalises only)", "use a checkpoint made of Transformer, Pooling and "
                        "Normalize modules, or encode with sentence-transformers itself")
    out["similarity"] = "cosine" if any(k.endswith(".Normalize") for k in kinds) else "dot"
    for m in modules:
        if str(m.get("type", "")).endswith(".Pooling"):
            sub = str(m.get("path", "")).strip("/")
            pool_file = checkpoint_file(name, f"{sub}/config.json" if sub else "config.json")
            if pool_file is None:
                raise DataError(modules_file, None, f"names a Pooling module in {sub or '.'!r} without its config.json",
                                "download the whole checkpoint (every file modules.json names)")
            pool = read_json(pool_file, _REWRITE)
            modes = sorted(k for k, v in pool.items() if k.startswith("pooling_mode") and v is True)
            if len(modes) != 1 or modes[0] not in _ST_POOLING:
                raise DataError(pool_file, None, f"pooling {modes or 'none'} has no equivalent in zsdr's encoder",
                                "use a checkpoint with CLS or mean pooling")
            out["pooling"] = _ST_POOLING[modes[0]]
    st_file = checkpoint_file(name, "sentence_bert_config.json")
    if st_file is not None:
        length = read_json(st_file, _REWRITE).get("max_seq_length")
        if isinstance(length, int) and length >= 2:
            out["query_max_length"] = out["doc_max_length"] = length
    return out


# ANCE's checkpoints (pyserini's AnceEncoder, the ANCE / MoDIR releases) keep the head beside the backbone.
_ANCE_NAMES = {"embeddingHead.weight": "linear.weight", "embeddingHead.bias": "linear.bias",
               "norm.weight": "norm.weight", "norm.bias": "norm.bias"}
HEAD_CHOICES = ("checkpoint", "new")


def find_head(name: str | os.PathLike) -> tuple[dict[str, torch.Tensor] | None, str]:
    """A ``cls_linear_ln`` head carried by checkpoint ``name`` (a folder or a hub id): ``head.safetensors``
    of a folder Encoder.save_pretrained wrote, or ANCE's ``embeddingHead`` + ``norm`` tensors in the
    weights (``model.safetensors``, ``pytorch_model.bin``, sharded or not, any common key prefix).
    Returns the head's state dict (or ``None``) and where it was looked for."""
    own = checkpoint_file(name, HEAD_FILE)
    if own is not None:
        return read_tensors([own], lambda k: True), str(own)
    files = weights_location(name)
    where = ", ".join(str(f) for f in files) or f"{name} (no weight file found)"
    for path in files:
        # One read of each file: the candidate tensors, then the prefix that has all four.
        found = read_tensors([path], lambda k: k.endswith(tuple(_ANCE_NAMES)))
        for key in found:
            if key.endswith("embeddingHead.weight"):
                wanted = {key[: -len("embeddingHead.weight")] + old: new for old, new in _ANCE_NAMES.items()}
                if set(wanted) <= set(found):
                    return {new: found[old] for old, new in wanted.items()}, str(path)
    return None, where


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
        # settings the model's retrieval system encodes with over ``config`` (a recipe's `system:`;
        # ``zsdr.json``'s ``retrieval``): applied by from_pretrained, saved apart from the training settings
        self.retrieval: dict[str, Any] = {}
        self._trained: dict[str, Any] = {}  # training settings ``config`` holds the retrieval values of
        self._special: tuple[list[int], list[int]] | None = None
        self._soft_ids: tuple[SoftTokens, dict[str, int]] | None = None  # the settings and each token's id
        self._half: tuple | None = None  # (key, backbone, head): the half-precision inference copy on a GPU
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
        overrides = _normalise_overrides(overrides)
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
            self._soft_ids = (soft, _soft_token_ids(self.tokenizer, self.backbone, soft))
        return self._soft_ids

    def _context_ids(self, contexts, n: int) -> list[tuple[list[int], list[int]]] | None:
        """Per text, the ids of its domain and relevance tokens (``None`` for an encoder without soft tokens).

        ``contexts``: ``None`` (the inference context for all), one ``(domain, relevance)`` pair for all,
        or a list with one pair per text.
        """
        found = self._soft()
        if found is None:
            if contexts is not None:
                raise ValueError("contexts need soft tokens, and this encoder has none (add them with "
                                 "Encoder.add_soft_tokens); pass contexts=None")
            return None
        soft, ids = found
        if contexts is None:
            contexts = [soft.inference] * n
        elif _is_context(contexts):
            contexts = [contexts] * n
        else:
            contexts = list(contexts)
            if len(contexts) != n:
                raise ValueError(f"{len(contexts)} contexts for {n} texts (give one (domain, relevance) pair per "
                                 "text, a single pair, or None)")
        cache: dict[tuple[str, str], tuple[list[int], list[int]]] = {}
        out = []
        for c in contexts:
            if not _is_context(c):
                raise ValueError(f"a context is a (domain, relevance) pair, got {c!r}")
            key = (c[0], c[1])
            if key not in cache:
                domain, relevance = soft.tokens(*key)
                cache[key] = ([ids[t] for t in domain], [ids[t] for t in relevance])
            out.append(cache[key])
        return out

    def _insert_soft(self, out: dict[str, list], soft: list[tuple[list[int], list[int]]]) -> dict[str, list]:
        """Put each row's domain ids right after the head special tokens and its relevance ids right before
        the tail ones. Inserted tokens take the token type of their neighbour inside (the token after the
        domain tokens, the one before the relevance tokens), offset ``(0, 0)`` and sequence id ``None``.
        A pair (``title_sep_text``) starts and ends with the specials of a single sequence (BERT
        ``[CLS] a [SEP] b [SEP]``, RoBERTa ``<s> a </s></s> b </s>``), so the same positions apply."""
        n_head, n_tail = (len(s) for s in self._specials())
        for i, (dom, rel) in enumerate(soft):
            length = len(out["input_ids"][i])
            a, b = n_head, length - n_tail
            out["input_ids"][i] = _splice(out["input_ids"][i], a, b, dom, rel)
            if "token_type_ids" in out:
                t = out["token_type_ids"][i]
                after = t[a] if a < length else (t[a - 1] if a else 0)
                before = t[b - 1] if b > 0 else (t[b] if b < length else 0)
                out["token_type_ids"][i] = _splice(t, a, b, [after] * len(dom), [before] * len(rel))
            if "offset_mapping" in out:
                out["offset_mapping"][i] = _splice(out["offset_mapping"][i], a, b, [(0, 0)] * len(dom),
                                                   [(0, 0)] * len(rel))
                out["sequence_ids"][i] = _splice(out["sequence_ids"][i], a, b, [None] * len(dom), [None] * len(rel))
        return out

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
                        **overrides) -> "Encoder":
        """Load a backbone + tokenizer (HF id or folder); ``zsdr.json`` settings apply, ``overrides`` win.

        ``overrides`` are :class:`EncoderConfig` fields (``None`` values are ignored) plus
        ``max_length`` for both lengths. ``device=None`` keeps the model on the CPU until it encodes.
        ``rem`` is a REM folder to plug into the loaded backbone (default: the one ``zsdr.json``
        names, if any; ``False``: none, the bare DAM). ``merge_rem`` merges its LoRA into the
        weights (inference); ``False`` keeps it unmerged and trainable.

        Settings come from ``zsdr.json``, else from a sentence-transformers configuration (hub ids
        too); a REM's ``rem.json`` settings (those it was trained under) take precedence over both,
        so a bare DAM with a REM encodes as the REM was trained; ``overrides`` win over all; a checkpoint with neither file must be given ``pooling`` and
        ``similarity`` explicitly (DataError otherwise: settings are never guessed).

        ``head`` (``cls_linear_ln`` pooling): ``None`` or ``"checkpoint"`` take the head the checkpoint
        carries (:func:`find_head`) and fail, naming the files searched, when it carries none;
        ``"new"`` starts a seeded head (``head_seed``) on a checkpoint that has none, such as a plain
        backbone a recipe fine-tunes, and fails when the checkpoint carries one.

        ``retrieval``: apply ``zsdr.json``'s ``retrieval`` settings (those the model's retrieval system
        encodes with, e.g. a longer document length than it trained at); ``False`` loads the training
        settings (a recipe continuing from the model). They are kept either way and saved again.
        """
        from transformers import AutoTokenizer

        if head not in (None, *HEAD_CHOICES):
            raise ValueError(f"head must be one of {', '.join(HEAD_CHOICES)} or None, got {head!r}")
        overrides = _normalise_overrides(overrides)
        name = str(name_or_path)
        folder = Path(name_or_path)
        local = is_local(name_or_path)
        if not local and (folder.is_absolute() or name.startswith((".", "~")) or name.count("/") > 1):
            raise DataError(name, None, "no such model folder", "pass an existing folder or a Hugging Face id")
        if checkpoint_file(name, "config.json") is None:
            where = "this folder" if local else ("the Hugging Face cache (the hub is offline)" if hub_offline()
                                                 else "the Hugging Face hub")
            raise DataError(name, None, f"no config.json in {where}: not a model checkpoint",
                            "pass a folder written by save_pretrained or a Hugging Face id"
                            + ("" if local else " whose files are in the cache"))
        saved_file = checkpoint_file(name, CONFIG_FILE)
        # zsdr.json says every setting; a folder zsdr wrote may also carry sentence-transformers modules
        # (ANCE's head as Dense + LayerNorm) that only sentence-transformers itself reads
        settings: dict[str, Any] = {} if saved_file is not None else dict(sentence_transformers_settings(name))
        saved_rem = None
        saved_retrieval: dict = {}
        trained_values: dict = {}  # the training settings the retrieval ones replace
        if saved_file is not None:
            saved = read_json(saved_file, _REWRITE)
            EncoderConfig.from_dict(saved, saved_file)  # validates
            settings.update({k: v for k, v in saved.items() if k in EncoderConfig.field_names()})
            saved_retrieval = saved.get("retrieval") or {}
            if not isinstance(saved_retrieval, dict) or set(saved_retrieval) - set(EncoderConfig.field_names()):
                raise DataError(saved_file, None, f"retrieval must map encoder settings to values, got "
                                f"{saved_retrieval!r}", _REWRITE)
            trained_values = {k: settings[k] for k in saved_retrieval if k in settings}
            if retrieval:
                settings.update(saved_retrieval)
            if saved.get("rem") is not None:
                if not isinstance(saved["rem"], str) or not saved["rem"]:
                    raise DataError(saved_file, None, f"rem must be a subfolder name, got {saved['rem']!r}", _REWRITE)
                if not local:
                    raise DataError(saved_file, None, "a REM is loaded from a local folder only",
                                    "download the model folder and load it from disk")
                saved_rem = folder / saved["rem"]
        rem_path = saved_rem if rem is None else (None if rem is False else rem)
        if rem_path is True:
            raise ValueError("rem must be a REM folder, None (the model's own) or False (none)")
        if rem_path is not None and retrieval:
            # the settings the REM's system encodes with (rem.json): a bare DAM has none of its own
            trained = rem_encoder_settings(rem_path)
            EncoderConfig.from_dict(trained, Path(rem_path) / "rem.json")  # validates
            settings.update({k: v for k, v in trained.items() if k in EncoderConfig.field_names()})
        unknown = [k for k in ("pooling", "similarity") if k not in settings and k not in overrides]
        if unknown:
            raise DataError(name, None, f"has no {CONFIG_FILE} and no sentence-transformers modules.json, so its "
                            f"{' and '.join(unknown)} would be a guess",
                            "say how it encodes: --pooling cls|mean|cls_linear_ln --similarity dot|cosine "
                            "(Encoder.from_pretrained(..., pooling=..., similarity=...), or a system's keys)")
        config = EncoderConfig(**{**settings, **overrides})
        saved_head, looked_in = (None, "")
        if config.pooling == "cls_linear_ln":
            saved_head, looked_in = find_head(name)
            if saved_head is None and head != "new":
                raise DataError(looked_in, None, f"{name} carries no cls_linear_ln head (ANCE's embeddingHead + norm, "
                                f"or {HEAD_FILE}), so the head would be random",
                                "load the checkpoint that has the head, or start a new one on purpose (a recipe's "
                                "`head: new`; Encoder.from_pretrained(..., head='new'))")
            if saved_head is not None and head == "new":
                raise DataError(looked_in, None, f"{name} carries a cls_linear_ln head, which head='new' would discard",
                                "use the checkpoint's head (a recipe's `head: checkpoint`) or start from a plain backbone")
        elif head == "new":
            raise ValueError(f"head='new' needs cls_linear_ln pooling, not {config.pooling}")
        try:
            tokenizer = AutoTokenizer.from_pretrained(name)
        except (OSError, ValueError) as exc:
            raise DataError(name, None, f"cannot load a tokenizer ({exc})",
                            "pass a Hugging Face id reachable offline or a folder written by save_pretrained") from None
        backbone = load_backbone(name)
        if config.soft_tokens is not None:
            try:
                _soft_token_ids(tokenizer, backbone, config.soft)
            except ValueError as exc:
                if "soft_tokens" in overrides:
                    raise ValueError(f"{exc}; overriding soft_tokens cannot add tokens, only Encoder.add_soft_tokens "
                                     "does") from None
                raise DataError(saved_file or name, None, str(exc), _SOFT_FIX) from None
        encoder = cls(backbone, tokenizer, config, name_or_path=name, precision=precision)
        encoder.retrieval = dict(saved_retrieval)
        if retrieval and trained_values and not overrides:
            encoder._trained = trained_values
        encoder.head_source = None
        if encoder.head is not None:
            if saved_head is not None:
                try:
                    encoder.head.load_state_dict(saved_head)
                except RuntimeError as exc:
                    raise DataError(looked_in, None, f"head weights do not fit the backbone ({exc})",
                                    "load the checkpoint the head was trained with") from None
                encoder.head_source = looked_in
                log.info("%s: cls_linear_ln head from %s", name, looked_in)
            else:
                log.info("%s: new cls_linear_ln head from seed %d (head='new')", name, config.head_seed)
        if rem_path is not None:
            encoder.load_rem(rem_path, merge=merge_rem)
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
        directory = Path(directory)
        with atomic_dir(directory) as tmp:
            if self.rem is None:
                self.backbone.save_pretrained(tmp)
            else:
                self.backbone.save_pretrained(tmp, state_dict=bare_state_dict(self.backbone, self.rem))
                (tmp / REM_DIR).mkdir()
                self.rem.write(tmp / REM_DIR, encoder=self.retrieval_config().to_dict())
            self.tokenizer.save_pretrained(tmp)
            trained = {k: v for k, v in self._trained.items() if getattr(self.config, k) == self.retrieval.get(k)}
            data = {"version": CONFIG_VERSION, **self.config.to_dict(), **trained, "backbone": self.name_or_path}
            if self.rem is not None:
                data["rem"] = REM_DIR
            if self.retrieval:
                data["retrieval"] = dict(self.retrieval)
            (tmp / CONFIG_FILE).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
            if self.head is not None:
                from safetensors.torch import save_file

                save_file({k: v.detach().cpu().contiguous() for k, v in self.head.state_dict().items()},
                          str(tmp / HEAD_FILE))
            if st_blocker(self.config, rem=self.rem is not None) is None:
                write_st_metadata(tmp, self.retrieval_config(), self.dim, head=self.head)
        return directory

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
        """Pooled vectors; with ``return_hidden`` also the last-layer token states (BERM's units)."""
        kwargs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:
            kwargs["token_type_ids"] = token_type_ids
        hidden = self.backbone(**kwargs).last_hidden_state
        pooled = self.pool(hidden, attention_mask)
        return (pooled, hidden) if return_hidden else pooled

    # ---------------------------------------------------------------------------- tokenising
    def _uses_token_types(self) -> bool:
        return "token_type_ids" in getattr(self.tokenizer, "model_input_names", ())

    def _specials(self) -> tuple[list[int], list[int]]:
        """The special ids a single sequence gets before and after its tokens (e.g. [CLS] / [SEP])."""
        if self._special is None:
            probe = "a"
            bare = self.tokenizer(probe, add_special_tokens=False)["input_ids"]
            full = self.tokenizer(probe, add_special_tokens=True)["input_ids"]
            for i in range(len(full) - len(bare) + 1):
                if full[i:i + len(bare)] == bare:
                    self._special = (full[:i], full[i + len(bare):])
                    break
            else:  # pragma: no cover - every tokenizer we know embeds the bare ids
                raise RuntimeError(f"cannot locate the special tokens of {type(self.tokenizer).__name__}")
        return self._special

    def _tokenize(self, first: list[str], second: list[str] | None, max_length: int, offsets: bool = False,
                  soft: list[tuple[list[int], list[int]]] | None = None,
                  setting: str = "doc_max_length") -> dict[str, list[list[int]]]:
        """Token ids (and token types); with ``offsets`` also each token's ``offset_mapping`` (character span
        in its own string) and ``sequence_ids`` (0 first string, 1 second, None special).

        ``soft`` (from :meth:`_context_ids`): each row's domain and relevance ids, placed around the text
        within ``max_length`` (the text is truncated to leave them room; ``setting`` names the length
        in errors).
        """
        if not first:
            out = {"input_ids": [], **({"token_type_ids": []} if self._uses_token_types() else {})}
            return {**out, "offset_mapping": [], "sequence_ids": []} if offsets else out
        if soft is not None:
            max_length = self._soft_budget(max_length, setting, pair=second is not None)
        enc = self.tokenizer(first, second, add_special_tokens=self.config.special_tokens, truncation=True,
                             max_length=max_length,
                             padding=False, return_attention_mask=False,
                             return_token_type_ids=self._uses_token_types(), return_offsets_mapping=offsets)
        out = {"input_ids": enc["input_ids"]}
        if self._uses_token_types():
            out["token_type_ids"] = enc["token_type_ids"]
        if offsets:
            out["offset_mapping"] = enc["offset_mapping"]
            out["sequence_ids"] = [enc.sequence_ids(i) for i in range(len(first))]
        return out if soft is None else self._insert_soft(out, soft)

    def _soft_budget(self, max_length: int, setting: str, pair: bool = False) -> int:
        """``max_length`` less the ``2k`` soft tokens, or ValueError when no text token would fit."""
        reserved = 2 * self.config.soft.k
        specials = self.tokenizer.num_special_tokens_to_add(pair=pair)
        if max_length - reserved < specials + 1:
            raise ValueError(f"{setting} {max_length} leaves no room for text beside {reserved} soft tokens and "
                             f"{specials} special tokens (set it to at least {reserved + specials + 1})")
        return max_length - reserved

    def tokenize_queries(self, texts: Sequence[str], contexts=None, max_length: int | None = None) -> dict[str, list[list[int]]]:
        """Token ids (and token types) of queries. ``contexts`` (encoders with soft tokens only): ``None``
        for the inference context, one ``(domain, relevance)`` pair for all, or one pair per text.
        ``max_length``: another length than ``query_max_length`` (MoDIR's target queries), at most the model's."""
        texts = list(texts)
        soft = self._context_ids(contexts, len(texts))
        p = self.config.query_prefix
        length = self.config.query_max_length if max_length is None else int(max_length)
        limit = self._max_positions()
        length = min(length, limit) if limit else length
        out = self._tokenize([p + t for t in texts], None, length, soft=soft, setting="query_max_length")
        return self._fill_queries(out) if self.config.query_fill else out

    def _fill_queries(self, out: dict[str, list[list[int]]]) -> dict[str, list[list[int]]]:
        """Every query row filled up to ``query_max_length`` with the attended ``query_fill`` token."""
        token = self.config.query_fill
        fill = self.tokenizer.convert_tokens_to_ids(token)
        if not isinstance(fill, int) or (fill == self.tokenizer.unk_token_id and token != self.tokenizer.unk_token):
            raise ValueError(f"query_fill {token!r} is not a token of this tokenizer")
        n = self.config.query_max_length
        out["input_ids"] = [row + [fill] * (n - len(row)) for row in out["input_ids"]]
        if "token_type_ids" in out:
            out["token_type_ids"] = [row + [row[-1] if row else 0] * (n - len(row)) for row in out["token_type_ids"]]
        return out

    def tokenize_docs(self, docs: Sequence[dict | str], offsets: bool = False,
                      contexts=None) -> dict[str, list[list[int]]]:
        """Token ids of documents in the ``doc_format``; ``offsets`` adds the character span of every token in
        the string it came from and its sequence id (:meth:`_tokenize`), for the formats that tokenise
        strings (not ``lower_title_text``, which joins title and text at the token level). ``contexts`` as
        in :meth:`tokenize_queries`; soft tokens have offset ``(0, 0)`` and sequence id ``None``."""
        cfg = self.config
        if offsets and cfg.doc_format == "lower_title_text":
            raise ValueError("doc_format lower_title_text joins title and text at the token level and has no "
                             "character offsets: use title_space_text, title_sep_text or text")
        docs = list(docs)
        soft = self._context_ids(contexts, len(docs))
        if not docs:
            return self._tokenize([], None, cfg.doc_max_length, offsets)
        titles = [("" if isinstance(d, str) else d.get("title") or "") for d in docs]
        texts = [(d if isinstance(d, str) else d.get("text") or "") for d in docs]
        p = cfg.doc_prefix
        if cfg.doc_format == "title_space_text":
            return self._tokenize([p + f"{t} {x}".strip() for t, x in zip(titles, texts)], None, cfg.doc_max_length,
                                  offsets, soft)
        if cfg.doc_format == "text":
            return self._tokenize([p + x for x in texts], None, cfg.doc_max_length, offsets, soft)
        if cfg.doc_format == "title_sep_text":
            return self._tokenize([p + t for t in titles], texts, cfg.doc_max_length, offsets, soft)
        # lower_title_text: title tokens (lower-cased) then text tokens, one segment, no separator.
        head, tail = self._specials() if cfg.special_tokens else ([], [])
        max_length = cfg.doc_max_length if soft is None else self._soft_budget(cfg.doc_max_length, "doc_max_length")
        budget = max(max_length - len(head) - len(tail), 0)
        bare = dict(add_special_tokens=False, truncation=True, max_length=max(budget, 1))
        t_ids = self.tokenizer([p + t.lower() for t in titles], **bare)["input_ids"]
        x_ids = self.tokenizer(texts, **bare)["input_ids"]
        ids = [head + (a + b)[:budget] + tail for a, b in zip(t_ids, x_ids)]
        out = {"input_ids": ids}
        if self._uses_token_types():
            out["token_type_ids"] = [[0] * len(i) for i in ids]
        return out if soft is None else self._insert_soft(out, soft)

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
        from tqdm.auto import tqdm

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
        order = np.argsort(-packed.lengths, kind="stable")  # longest first: padding stays within similar lengths
        budget = max_tokens or batch_size * max(int(packed.lengths[order[0]]), 1)
        cuda = target.type == "cuda"
        # Results stay on the device until the end: one transfer, no synchronisation per batch.
        out = torch.empty((n, self.dim), dtype=torch.float32, device=target)
        order_dev = torch.from_numpy(order).to(target)
        was_training = self.training
        self.eval()
        bar = tqdm(total=n, desc=desc, unit="text", disable=not show_progress, leave=False)
        try:
            backbone, head = self._inference_modules(half)
            with torch.inference_mode():
                for start, stop in batch_bounds(packed.lengths[order], budget):
                    arrays = packed.pad(order[start:stop], self.pad_id)
                    batch = {}
                    for k, v in arrays.items():
                        t = torch.from_numpy(v)
                        batch[k] = t.pin_memory().to(target, non_blocking=True) if cuda else t
                    emb = self._embed(backbone, head, batch)
                    out.index_copy_(0, order_dev[start:stop], emb.float())
                    bar.update(stop - start)
        finally:
            bar.close()
            self.train(was_training)
            if was_training:  # an encoder in training (mining between episodes): its weights move on
                self.release_inference_copy()
        return out.cpu().numpy()

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
        many = contexts is not None and not _is_context(contexts)
        if many and len(contexts) != len(docs):
            raise ValueError(f"{len(contexts)} contexts for {len(docs)} texts (give one (domain, relevance) pair per "
                             "text, a single pair, or None)")
        starts = range(0, len(docs), chunk_size)

        def tokenize(start: int) -> Packed:
            part = contexts[start:start + chunk_size] if many else contexts
            return Packed.of(self.tokenize_docs(docs[start:start + chunk_size], contexts=part))

        parts = [self.encode_tokenized(packed, batch_size, device, precision, show_progress, desc="docs")
                 for packed in prefetched(map(tokenize, starts))]
        return np.concatenate(parts)

    def describe(self) -> dict:
        out = {"model": self.name_or_path, "dim": self.dim, **self.config.to_dict(), "normalize": self.config.normalize}
        soft = self.config.soft
        if soft is not None:
            out["soft_tokens"] = {**soft.to_dict(), "tokens": soft.all_tokens()}
        if self.rem is not None:
            out["rem"] = self.rem.describe()
        return out


@contextlib.contextmanager
def quiet_transformers():
    """Silence transformers' load report and progress bars (missing weights are logged by us)."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


def load_backbone(name: str) -> nn.Module:
    """``AutoModel`` without its pooler (unused); warns about weights the checkpoint lacks."""
    from transformers import AutoModel

    try:
        with quiet_transformers():
            try:
                backbone, info = AutoModel.from_pretrained(name, add_pooling_layer=False, output_loading_info=True)
            except TypeError:  # architectures without a pooler take no such argument
                backbone, info = AutoModel.from_pretrained(name, output_loading_info=True)
    except OSError as exc:
        raise DataError(name, None, f"cannot load a model ({exc})",
                        "pass a Hugging Face id reachable offline or a folder written by save_pretrained") from None
    missing = sorted(k for k in info.get("missing_keys", ()) if not k.startswith("pooler."))
    if missing:
        log.warning("%s: %d weights missing from the checkpoint were initialised randomly (e.g. %s)", name,
                    len(missing), missing[0])
    unexpected = sorted(info.get("unexpected_keys", ()))
    if unexpected:
        log.debug("%s: %d checkpoint weights unused (e.g. %s)", name, len(unexpected), unexpected[0])
    return backbone


def set_dropout(model: nn.Module, p: float | None) -> None:
    """Override every dropout probability of ``model`` (``None`` keeps the checkpoint's)."""
    if p is None:
        return
    cfg = getattr(model, "config", None)
    for name in ("hidden_dropout_prob", "attention_probs_dropout_prob", "dropout", "attention_dropout"):
        if cfg is not None and hasattr(cfg, name):
            setattr(cfg, name, p)
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.p = p
        elif hasattr(m, "dropout_prob") and isinstance(m.dropout_prob, float):
            m.dropout_prob = p


def _is_context(value) -> bool:
    """Whether ``value`` is one ``(domain, relevance)`` pair (rather than a list of them)."""
    return isinstance(value, (tuple, list)) and len(value) == 2 and all(isinstance(v, str) for v in value)


def _splice(row: list, start: int, end: int, left: list, right: list) -> list:
    """``row`` with ``left`` inserted before position ``start`` and ``right`` before position ``end``."""
    return list(row[:start]) + left + list(row[start:end]) + right + list(row[end:])


def _soft_token_ids(tokenizer, backbone: nn.Module, soft: SoftTokens) -> dict[str, int]:
    """Each soft token string's id; ValueError unless every one is a distinct, known id with an embedding row."""
    strings = soft.all_tokens()
    ids = tokenizer.convert_tokens_to_ids(strings)
    rows = backbone.get_input_embeddings().num_embeddings
    unk = tokenizer.unk_token_id
    bad = [t for t, i in zip(strings, ids) if not isinstance(i, int) or i == unk or not 0 <= i < rows]
    if bad:
        raise ValueError(f"soft tokens {bad} are not in the tokenizer's vocabulary or have no embedding row "
                         f"({rows} rows)")
    if len(set(ids)) != len(ids):
        raise ValueError(f"soft tokens {strings} do not map to distinct ids ({ids})")
    return dict(zip(strings, ids))


def _normalise_overrides(overrides: dict) -> dict:
    overrides = {k: v for k, v in overrides.items() if v is not None}
    length = overrides.pop("max_length", None)
    if length is not None:
        overrides.setdefault("query_max_length", length)
        overrides.setdefault("doc_max_length", length)
    unknown = sorted(set(overrides) - set(EncoderConfig.field_names()))
    if unknown:
        raise TypeError(f"unknown encoder settings {unknown} (known: {', '.join(EncoderConfig.field_names())}, max_length)")
    return overrides


def load_encoder(model: "str | os.PathLike | Encoder", device=None, precision: str | None = None,
                 rem: str | os.PathLike | bool | None = None, merge_rem: bool = True, **overrides) -> Encoder:
    """``model`` itself when it is an :class:`Encoder` (no overrides allowed), else ``Encoder.from_pretrained``
    (``rem`` / ``merge_rem`` as there)."""
    if isinstance(model, Encoder):
        if _normalise_overrides(overrides):
            raise ValueError("encoder settings cannot be overridden on an Encoder instance; call encoder.configure()")
        if rem is not None and rem is not False:
            raise ValueError("a REM cannot be plugged into an Encoder instance here; call encoder.load_rem()")
        if precision is not None:
            model.precision = precision
        return model
    return Encoder.from_pretrained(model, device=device, precision=precision or "auto", rem=rem,
                                   merge_rem=merge_rem, **overrides)


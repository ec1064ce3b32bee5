"""How texts become vectors: :class:`EncoderConfig`, and where a loaded model's settings come from.

:func:`resolve_settings` is the one place that decides a loaded encoder's settings. It is a pure
function of every source, already read (:mod:`zsdr.models.loading` reads the files); from lowest
to highest precedence:

1. **defaults**: :class:`EncoderConfig`'s field defaults (``pooling`` and ``similarity`` excepted:
   they are never guessed, one of the sources below must say them);
2. **sentence-transformers metadata** (``modules.json`` and its files,
   :func:`zsdr.models.st_files.sentence_transformers_settings`): pooling, normalisation, maximum
   length; consulted only for a checkpoint without ``zsdr.json`` and without export metadata (the
   sentence-transformers files of a folder zsdr wrote are derived from those, and may hold
   modules only sentence-transformers reads);
3. **export metadata** (``encoder`` of the ``zsdr_export.json`` that ``zsdr export`` writes): every
   setting the exported encoder had; consulted only without ``zsdr.json``;
4. **zsdr.json**: the settings the model was trained with, then, when ``retrieval`` is true, its
   ``retrieval`` section (the settings its retrieval system encodes with) over them;
5. **the REM's settings** (``encoder`` of its ``rem.json``, when ``retrieval`` is true): a bare DAM
   with a REM encodes as the REM was trained;
6. **explicit overrides** (keyword arguments, a system's settings): they win over everything.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from zsdr.io import DataError
from zsdr.models.soft_tokens import SoftTokens

POOLINGS = ("cls", "mean", "cls_linear_ln")
SIMILARITIES = ("dot", "cosine")
DOC_FORMATS = ("title_space_text", "title_sep_text", "lower_title_text", "text")
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
# Keys of zsdr.json that are no encoder settings.
FILE_KEYS = ("version", "backbone", "rem", "retrieval")
EXPORT_FILE = "zsdr_export.json"  # what `zsdr export` exported, with the settings to load it with (``encoder``)
EXPORTED_REM_TYPE = "zsdr-rem-"  # the model_type prefix of an export whose REM keeps its parallel adapter
# The sources of resolve_settings, lowest precedence first (ResolvedSettings.sources names them).
SOURCES = ("default", "sentence-transformers", "export", "zsdr.json", "zsdr.json retrieval", "rem", "override")


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
        unknown = sorted(set(data) - known - set(FILE_KEYS))
        if unknown:
            raise DataError(path, None, f"unknown encoder settings {unknown}", f"known: {', '.join(sorted(known))}")
        try:
            return cls(**{k: v for k, v in data.items() if k in known})
        except DataError as exc:  # the soft tokens' own message and fix
            raise DataError(path, None, exc.message, exc.fix) from None
        except ValueError as exc:
            raise DataError(path, None, str(exc), "fix the encoder settings") from None


def normalise_overrides(overrides: dict) -> dict:
    """Explicit settings as :class:`EncoderConfig` fields: ``None`` values dropped, ``max_length`` set
    for both lengths (an explicit length of either kind wins); TypeError naming an unknown one."""
    overrides = {k: v for k, v in overrides.items() if v is not None}
    length = overrides.pop("max_length", None)
    if length is not None:
        overrides.setdefault("query_max_length", length)
        overrides.setdefault("doc_max_length", length)
    unknown = sorted(set(overrides) - set(EncoderConfig.field_names()))
    if unknown:
        raise TypeError(f"unknown encoder settings {unknown} (known: {', '.join(EncoderConfig.field_names())}, max_length)")
    return overrides


@dataclass(frozen=True)
class ResolvedSettings:
    """What :func:`resolve_settings` decided: the ``config``; the model's ``retrieval`` settings (kept
    whether applied or not, and saved again); ``trained``: the training values the applied retrieval
    settings replaced (saved back as the training settings; empty when overrides were given);
    ``sources``: for every setting a source said, the source it came from (:data:`SOURCES`)."""

    config: EncoderConfig
    retrieval: dict[str, Any] = field(default_factory=dict)
    trained: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)


def resolve_settings(name: str | os.PathLike, *, overrides: dict | None = None, saved: dict | None = None,
                     st: dict | None = None, export: dict | None = None, rem: dict | None = None,
                     retrieval: bool = True) -> ResolvedSettings:
    """The encoder settings of checkpoint ``name`` from every source (module docstring: the precedence).

    ``overrides``: explicit settings (:func:`normalise_overrides`' form); ``saved``: the content of
    ``zsdr.json`` (settings, ``retrieval``; validated by the caller); ``st``: the
    sentence-transformers settings; ``export``: the exported encoder's settings; ``rem``: the
    settings of the REM plugged in; ``retrieval``: apply ``zsdr.json``'s and the REM's retrieval
    settings (``False``: the training settings, for a recipe continuing from the model). ``None``
    means the source is absent. DataError (naming ``name``) when no source says the pooling or the
    similarity: they are never guessed.
    """
    known = set(EncoderConfig.field_names())
    overrides = dict(overrides or {})
    settings: dict[str, Any] = {}
    sources: dict[str, str] = {}

    def apply(values: dict | None, source: str) -> None:
        for k, v in (values or {}).items():
            if k in known:
                settings[k] = v
                sources[k] = source

    saved_retrieval: dict = {}
    trained: dict = {}
    if saved is None:
        apply(st if export is None else None, "sentence-transformers")
        apply(export, "export")
    else:
        apply(saved, "zsdr.json")
        saved_retrieval = dict(saved.get("retrieval") or {})
        trained = {k: settings[k] for k in saved_retrieval if k in settings}
        if retrieval:
            apply(saved_retrieval, "zsdr.json retrieval")
    if retrieval:
        apply(rem, "rem")
    missing = [k for k in ("pooling", "similarity") if k not in settings and k not in overrides]
    if missing:
        raise DataError(name, None, f"has no zsdr.json and no sentence-transformers modules.json, so its "
                        f"{' and '.join(missing)} would be a guess",
                        "say how it encodes: --pooling cls|mean|cls_linear_ln --similarity dot|cosine "
                        "(Encoder.from_pretrained(..., pooling=..., similarity=...), or a system's keys)")
    apply(overrides, "override")
    for k in known - set(sources):
        sources[k] = "default"
    config = EncoderConfig(**settings)
    return ResolvedSettings(config, saved_retrieval, trained if retrieval and trained and not overrides else {},
                            sources)

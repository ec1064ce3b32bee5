"""Model folders: reading a checkpoint's parts and settings, writing an encoder's folder.

A model folder written by :meth:`Encoder.save_pretrained <zsdr.models.encoder.Encoder.save_pretrained>`
(:func:`write_folder`) holds the backbone and tokenizer (``save_pretrained`` of each), ``zsdr.json``
(the :class:`~zsdr.models.settings.EncoderConfig`, the backbone it came from, its ``retrieval``
settings, its REM's subfolder), for the ``cls_linear_ln`` pooling ``head.safetensors``, with a REM
the REM in ``rem/``, and sentence-transformers metadata where the folder's own weights and tokenizer
encode that way, else the files with which sentence-transformers refuses it, naming ``zsdr export``
(:mod:`zsdr.models.st_files`).

:func:`read_pretrained` reads what :meth:`Encoder.from_pretrained
<zsdr.models.encoder.Encoder.from_pretrained>` builds an encoder from: any Hugging Face id or folder
(:mod:`zsdr.models.checkpoints` finds a hub id's files in the Hugging Face cache, offline too), its
settings from every source (:func:`zsdr.models.settings.resolve_settings`), the tokenizer, the
backbone, the ``cls_linear_ln`` head the checkpoint carries (:func:`find_head`: zsdr's
``head.safetensors``, ANCE's ``embeddingHead`` + ``norm`` or an export's sentence-transformers
``Dense`` + ``LayerNorm``; never a silent random head) and the REM to plug in.

A folder ``zsdr export`` wrote is read as zsdr wrote it: its settings from ``zsdr_export.json`` (the
tokenizer writes an RMSC model's soft tokens itself), and a REM's parallel adapter rebuilt from the
weights by zsdr's own code (:func:`zsdr.models.adapters.rem_with_adapters`), so the folder's
``zsdr_rem.py`` never runs. Any other checkpoint whose ``config.json`` asks for its own code runs it
only with ``trust_remote_code=True``, and is refused otherwise with one line, never a question on stdin.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from zsdr.io import DataError, atomic_dir, read_json, verify_model_contents
from zsdr.models.adapters import RemConfig, bare_state_dict, rem_encoder_settings
from zsdr.models.checkpoints import (check_vocabulary, checkpoint_file, hub_offline, hub_reachable, is_local,
                                     looks_like_path, read_tensors, tokenizer_problem, weights_location)
from zsdr.models.settings import EXPORT_FILE, EXPORTED_REM_TYPE, EncoderConfig, ResolvedSettings, resolve_settings
from zsdr.models.st_files import sentence_transformers_settings, st_blocker, write_st_metadata, write_st_refusal
from zsdr.models.texts import soft_token_ids

log = logging.getLogger(__name__)

CONFIG_FILE = "zsdr.json"
HEAD_FILE = "head.safetensors"
CONFIG_VERSION = 1
REM_DIR = "rem"
_REWRITE = "write the file again (save the model with save_pretrained)"
_SOFT_FIX = ("load the folder Encoder.save_pretrained wrote with the soft tokens (its tokenizer and weights carry them), "
             "or add them to the bare model with Encoder.add_soft_tokens")


# ANCE's checkpoints (pyserini's AnceEncoder, the ANCE / MoDIR releases) keep the head beside the backbone.
_ANCE_NAMES = {"embeddingHead.weight": "linear.weight", "embeddingHead.bias": "linear.bias",
               "norm.weight": "norm.weight", "norm.bias": "norm.bias"}
HEAD_CHOICES = ("checkpoint", "new")
# The head as the sentence-transformers modules st_files.st_metadata writes (an exported folder).
_ST_HEAD = ("2_Dense/model.safetensors", "3_LayerNorm/model.safetensors")
_REMOTE_FIX = ("pass --trust-remote-code (Encoder.from_pretrained(..., trust_remote_code=True)) if you trust it, "
               "or use a checkpoint transformers knows")


def find_head(name: str | os.PathLike) -> tuple[dict[str, torch.Tensor] | None, str]:
    """A ``cls_linear_ln`` head carried by checkpoint ``name`` (a folder or a hub id): ``head.safetensors``
    of a folder Encoder.save_pretrained wrote, or ANCE's ``embeddingHead`` + ``norm`` tensors in the
    weights (``model.safetensors``, ``pytorch_model.bin``, sharded or not, any common key prefix).
    Returns the head's state dict (or ``None``) and where it was looked for."""
    own = checkpoint_file(name, HEAD_FILE)
    if own is not None:
        return read_tensors([own], lambda k: True), str(own)
    dense, norm = checkpoint_file(name, _ST_HEAD[0]), checkpoint_file(name, _ST_HEAD[1])
    if dense is not None and norm is not None:  # an export's sentence-transformers Dense + LayerNorm modules
        return {**read_tensors([dense], lambda k: True), **read_tensors([norm], lambda k: True)}, str(dense)
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


def known_model_type(config_file: Path) -> bool:
    """Whether the ``model_type`` a ``config.json`` names is one transformers has code for."""
    from transformers import CONFIG_MAPPING

    try:
        model_type = json.loads(Path(config_file).read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError, AttributeError):
        return True  # the loader's own error names the file
    return not isinstance(model_type, str) or model_type in CONFIG_MAPPING


def load_backbone(name: str, trust_remote_code: bool = False, config=None) -> nn.Module:
    """``AutoModel`` without its pooler (unused); warns about weights the checkpoint lacks. A checkpoint
    whose config asks for its own code is refused (one line) unless ``trust_remote_code``: transformers
    is never left to ask on stdin. ``config``: the model's config, given (an export's, see the module
    docstring)."""
    from transformers import AutoModel

    kwargs = {"output_loading_info": True, "trust_remote_code": bool(trust_remote_code),
              **({"config": config} if config is not None else {})}
    try:
        with quiet_transformers():
            try:
                backbone, info = AutoModel.from_pretrained(name, add_pooling_layer=False, **kwargs)
            except TypeError:  # architectures without a pooler take no such argument
                backbone, info = AutoModel.from_pretrained(name, **kwargs)
    except OSError as exc:
        raise DataError(name, None, f"cannot load a model ({exc})",
                        "pass a Hugging Face id reachable offline or a folder written by save_pretrained") from None
    except ValueError as exc:
        if "trust_remote_code" not in str(exc):
            raise
        raise DataError(name, None, "its config.json asks to run the checkpoint's own code", _REMOTE_FIX) from None
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


def read_export_json(path: Path) -> dict:
    """A ``zsdr_export.json``, validated: its ``encoder`` settings are those to load the export with (an
    older export's soft tokens left out: its tokenizer writes them)."""
    info = read_json(path, "export the model again with `zsdr export`")
    settings = info.get("encoder")
    if not isinstance(settings, dict):
        raise DataError(path, None, f"encoder must map encoder settings to values, got {settings!r}",
                        "export the model again with `zsdr export`")
    if info.get("soft_token_context"):
        settings = {**settings, "soft_tokens": None}
    EncoderConfig.from_dict(settings, path)  # validates
    return {**info, "encoder": settings}


def exported_rem(name: str, where: Path) -> tuple[Any, RemConfig, dict] | None:
    """For an export whose REM kept its parallel adapter (model_type ``zsdr-rem-<type>``): the backbone's
    config as ``<type>``'s, the adapter's settings and its weights, read without running the folder's
    code; ``None`` for any other export."""
    from transformers import AutoConfig

    raw = read_json(where, "export the model again with `zsdr export`")
    model_type = str(raw.get("model_type", ""))
    if not model_type.startswith(EXPORTED_REM_TYPE):
        return None
    fix = "export the model again with `zsdr export`"
    extra = ("model_type", "auto_map", "architectures", "rem_adapter_bottleneck", "rem_adapter_scaling",
             "transformers_version")
    try:
        config = AutoConfig.for_model(model_type[len(EXPORTED_REM_TYPE):],
                                      **{k: v for k, v in raw.items() if k not in extra})
        rem = RemConfig(adapter_bottleneck=raw["rem_adapter_bottleneck"], adapter_scaling=raw["rem_adapter_scaling"])
    except (KeyError, ValueError, TypeError) as exc:
        raise DataError(where, None, f"not a config zsdr export writes ({exc})", fix) from None
    prefix = "rem_adapters."
    weights = read_tensors(weights_location(name), lambda k: k.startswith(prefix))
    if not weights:
        raise DataError(name, None, "its config names a parallel adapter its weights do not hold", fix)
    return config, rem, {k[len(prefix):]: v for k, v in weights.items()}


def read_zsdr_json(path: Path, local: bool) -> dict:
    """A ``zsdr.json``, validated: its settings, ``retrieval`` (encoder settings) and ``rem`` (a
    subfolder name, of a local folder only)."""
    saved = read_json(path, _REWRITE)
    EncoderConfig.from_dict(saved, path)  # validates
    saved_retrieval = saved.get("retrieval") or {}
    if not isinstance(saved_retrieval, dict) or set(saved_retrieval) - set(EncoderConfig.field_names()):
        raise DataError(path, None, f"retrieval must map encoder settings to values, got {saved_retrieval!r}",
                        _REWRITE)
    if saved.get("rem") is not None:
        if not isinstance(saved["rem"], str) or not saved["rem"]:
            raise DataError(path, None, f"rem must be a subfolder name, got {saved['rem']!r}", _REWRITE)
        if not local:
            raise DataError(path, None, "a REM is loaded from a local folder only",
                            "download the model folder and load it from disk")
    return saved


@dataclass
class Pretrained:
    """What :func:`read_pretrained` read: the parts of an encoder and what to plug into it."""

    name: str
    backbone: nn.Module
    tokenizer: Any
    settings: ResolvedSettings
    head_state: dict[str, torch.Tensor] | None  # the checkpoint's cls_linear_ln head, if it has one
    head_source: str                            # where the head was looked for (found: its file)
    rem_path: str | os.PathLike | None          # the REM to plug in
    exported_rem: tuple[RemConfig, dict] | None = None  # an export's parallel adapter: settings, weights


def read_pretrained(name_or_path: str | os.PathLike, *, rem: str | os.PathLike | bool | None = None,
                    head: str | None = None, retrieval: bool = True, overrides: dict | None = None,
                    trust_remote_code: bool = False) -> Pretrained:
    """The parts of the encoder in checkpoint ``name_or_path`` (arguments as in
    :meth:`Encoder.from_pretrained <zsdr.models.encoder.Encoder.from_pretrained>`; ``overrides`` in
    :func:`~zsdr.models.settings.normalise_overrides`' form). Every mistake is a DataError naming the
    checkpoint or its file, raised before the weights are read where it can be."""
    from transformers import AutoTokenizer

    if head not in (None, *HEAD_CHOICES):
        raise ValueError(f"head must be one of {', '.join(HEAD_CHOICES)} or None, got {head!r}")
    overrides = dict(overrides or {})
    name = str(name_or_path)
    folder = Path(name_or_path)
    local = is_local(name_or_path)
    if not local and looks_like_path(name):
        raise DataError(name, None, "no such model folder", "pass an existing folder or a Hugging Face id")
    config_file = checkpoint_file(name, "config.json")
    if config_file is None:
        where = "this folder" if local else ("the Hugging Face cache (the hub is offline)" if hub_offline()
                                             else "the Hugging Face cache (the hub cannot be reached)"
                                             if not hub_reachable() else "the Hugging Face hub")
        raise DataError(name, None, f"no config.json in {where}: not a model checkpoint",
                        "pass a folder written by save_pretrained or a Hugging Face id"
                        + ("" if local else " whose files are in the cache"))
    if local and tokenizer_problem(folder):
        raise DataError(name, None, tokenizer_problem(folder), "save the model's tokenizer into the folder "
                        "(save_pretrained), or copy the folder again")
    if local:
        verify_model_contents(folder)   # its files are those it was written with
    saved_file = checkpoint_file(name, CONFIG_FILE)
    export_file = checkpoint_file(name, EXPORT_FILE) if saved_file is None else None
    export = read_export_json(export_file) if export_file is not None else None
    # zsdr.json (or an export's zsdr_export.json) says every setting; a folder zsdr wrote may also carry
    # sentence-transformers modules (ANCE's head as Dense + LayerNorm) that only sentence-transformers reads
    st = sentence_transformers_settings(name) if saved_file is None and export is None else None
    saved = read_zsdr_json(saved_file, local) if saved_file is not None else None
    saved_rem = folder / saved["rem"] if saved is not None and saved.get("rem") is not None else None
    rem_path = saved_rem if rem is None else (None if rem is False else rem)
    if rem_path is True:
        raise ValueError("rem must be a REM folder, None (the model's own) or False (none)")
    rem_settings = None
    if rem_path is not None and retrieval:
        # the settings the REM's system encodes with (rem.json): a bare DAM has none of its own
        rem_settings = rem_encoder_settings(rem_path)
        EncoderConfig.from_dict(rem_settings, Path(rem_path) / "rem.json")  # validates
    settings = resolve_settings(name, overrides=overrides, saved=saved, st=st, rem=rem_settings,
                                export=None if export is None else export["encoder"], retrieval=retrieval)
    config = settings.config
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
        # an export's config (or a foreign folder's) may name a model type transformers does not know, which
        # it would warn about before the refusal below (one line of ours is the whole message)
        quiet = export is not None or not known_model_type(config_file)
        with quiet_transformers() if quiet else contextlib.nullcontext():
            tokenizer = AutoTokenizer.from_pretrained(name, trust_remote_code=bool(trust_remote_code))
    except ValueError as exc:
        if "trust_remote_code" in str(exc):
            raise DataError(name, None, "its tokenizer asks to run the checkpoint's own code", _REMOTE_FIX) from None
        raise DataError(name, None, f"cannot load a tokenizer ({exc})",
                        "pass a Hugging Face id reachable offline or a folder written by save_pretrained") from None
    except OSError as exc:
        raise DataError(name, None, f"cannot load a tokenizer ({exc})",
                        "pass a Hugging Face id reachable offline or a folder written by save_pretrained") from None
    adapter = exported_rem(name, config_file) if export is not None else None
    if adapter is not None and rem_path is not None:
        raise DataError(name, None, "this export already holds a REM", "load it without rem=")
    backbone = load_backbone(name, trust_remote_code, config=None if adapter is None else adapter[0])
    check_vocabulary(name, tokenizer, backbone)
    if config.soft_tokens is not None:
        try:
            soft_token_ids(tokenizer, backbone.get_input_embeddings().num_embeddings, config.soft)
        except ValueError as exc:
            if "soft_tokens" in overrides:
                raise ValueError(f"{exc}; overriding soft_tokens cannot add tokens, only Encoder.add_soft_tokens "
                                 "does") from None
            raise DataError(saved_file or name, None, str(exc), _SOFT_FIX) from None
    return Pretrained(name, backbone, tokenizer, settings, saved_head, looked_in, rem_path,
                      None if adapter is None else adapter[1:])


def write_folder(directory: str | os.PathLike, *, backbone: nn.Module, tokenizer, settings: dict,
                 config: EncoderConfig, retrieval_config: EncoderConfig, dim: int, head: nn.Module | None = None,
                 rem=None) -> Path:
    """Write an encoder's folder (module docstring) to ``directory`` atomically: ``settings`` is the
    content of ``zsdr.json``; ``config`` the encoder's settings, ``retrieval_config`` those its
    retrieval system encodes with (the REM's ``rem.json`` and the sentence-transformers metadata say
    these); ``rem``: the unmerged :class:`~zsdr.models.adapters.Rem` (the backbone is then written
    bare, the DAM, and the REM to ``rem/``)."""
    directory = Path(directory)
    with atomic_dir(directory) as tmp:
        if rem is None:
            backbone.save_pretrained(tmp)
        else:
            backbone.save_pretrained(tmp, state_dict=bare_state_dict(backbone, rem))
            (tmp / REM_DIR).mkdir()
            rem.write(tmp / REM_DIR, encoder=retrieval_config.to_dict())
        tokenizer.save_pretrained(tmp)
        (tmp / CONFIG_FILE).write_text(json.dumps(settings, indent=1) + "\n", encoding="utf-8")
        if head is not None:
            from safetensors.torch import save_file

            save_file({k: v.detach().cpu().contiguous() for k, v in head.state_dict().items()},
                      str(tmp / HEAD_FILE))
        blocker = st_blocker(config, rem=rem is not None)
        if blocker is None:
            write_st_metadata(tmp, retrieval_config, dim, head=head)
        else:  # sentence-transformers would load it wrongly: it refuses the folder, naming the fix
            write_st_refusal(tmp, blocker)
    return directory

"""sentence-transformers metadata: read from a foreign checkpoint, written into zsdr's model folders.

:func:`sentence_transformers_settings` reads the pooling, normalisation and maximum length of a
sentence-transformers checkpoint (a folder or a hub id) for :func:`zsdr.models.settings.resolve_settings`.

:func:`write_st_metadata` writes the files with which ``SentenceTransformer(folder)`` encodes as the
:class:`~zsdr.models.encoder.Encoder` does: ``modules.json`` (Transformer, Pooling, for ANCE's head Dense
and LayerNorm, and for cosine similarity Normalize), ``1_Pooling/config.json``, ``sentence_bert_config.json`` (the *documents'*
maximum length: sentence-transformers has one length for every text; queries were encoded at
``query_max_length``, which ``model.max_seq_length = ...`` sets before encoding them) and
``config_sentence_transformers.json`` (the query and document prefixes as prompts, the similarity).
The files use the classic layout (``sentence_transformers.models.*``), which every sentence-transformers
release since 2.x loads (zsdr reads a folder's ``zsdr.json`` instead; the plain-pooling layout is
what :func:`sentence_transformers_settings` reads from a folder without one).
:meth:`Encoder.save_pretrained <zsdr.models.encoder.Encoder.save_pretrained>` writes them whenever
the folder's own weights and tokenizer encode that way (:func:`st_blocker` says when not: a REM,
soft tokens, TCT-ColBERT's input convention).

Where they do not, sentence-transformers would load the folder as a plain Transformer with mean pooling
and return other vectors without a word. Such a folder gets :func:`write_st_refusal`'s files instead:
``config_sentence_transformers.json`` declares a requirement no installation meets, with the reason
(naming ``zsdr export``) as its text, which sentence-transformers (6.x) checks before it loads any
module and raises as an ImportError; ``modules.json`` names a module class that does not exist, so a
release that does not read requirements refuses the folder too. :func:`st_refusal` reads the reason back.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from zsdr.io import DataError, read_json
from zsdr.models.checkpoints import checkpoint_file
from zsdr.models.settings import EncoderConfig

ST_MODULES = "modules.json"
ST_POOLING_DIR = "1_Pooling"
ST_CONFIG = "sentence_bert_config.json"
ST_MODEL_CONFIG = "config_sentence_transformers.json"
# The refusal: a requirement of the running Python no version meets (PEP 440 arbitrary equality), and a
# module class sentence-transformers does not define.
REFUSAL_PACKAGE, REFUSAL_SPECIFIER = "python", "===zsdr-export"
REFUSAL_MODULE = "sentence_transformers.RequiresZsdrExport"
_REWRITE = "write the file again (save the model with save_pretrained)"


# sentence-transformers' Pooling modes and the pooling each means here (the others have no equivalent).
_ST_POOLING = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean"}
# Modules that change nothing an Encoder computes: the transformer itself and the L2 normalisation.
_ST_KINDS = (".Transformer", ".Pooling", ".Normalize")


def sentence_transformers_settings(name: str | os.PathLike) -> dict:
    """Pooling / similarity / max length of a sentence-transformers checkpoint (a folder or a hub id);
    empty for other checkpoints. A module or pooling mode an :class:`Encoder` cannot reproduce (a Dense
    projection, max pooling, ...) is an error naming ``modules.json``, never a silent approximation."""
    modules_file = checkpoint_file(name, ST_MODULES)
    if modules_file is None:
        return {}
    out: dict[str, Any] = {}
    modules = read_json(modules_file, _REWRITE, expect=list)
    kinds = [str(m.get("type", "")) for m in modules if isinstance(m, dict)]
    foreign = [k for k in kinds if not k.endswith(_ST_KINDS)]
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
    st_file = checkpoint_file(name, ST_CONFIG)
    if st_file is not None:
        length = read_json(st_file, _REWRITE).get("max_seq_length")
        if isinstance(length, int) and length >= 2:
            out["query_max_length"] = out["doc_max_length"] = length
    return out


def st_blocker(config: EncoderConfig, rem: bool = False, soft: bool = False) -> str | None:
    """Why the folder's own weights and tokenizer cannot encode as ``config`` says under
    sentence-transformers, as the sentence its refusal shows (``None``: they can). ``rem``: the folder
    holds a REM apart from its weights; ``soft``: its texts need soft tokens inserted."""
    if rem:
        return ("This folder holds DDR's domain module (DAM) as its weights and the relevance module (REM) apart "
                "in rem/, which sentence-transformers would leave out: write a standalone folder with `zsdr export "
                "THIS_FOLDER OUT_DIR` and load that (trust_remote_code=True where its zsdr_export.json says so)")
    if soft or config.soft_tokens is not None:
        return ("The texts of this folder take RMSC's soft tokens, which its plain tokenizer does not insert: write "
                "a standalone folder with `zsdr export THIS_FOLDER OUT_DIR` (its tokenizer writes them) and load that")
    if not config.special_tokens or config.pool_skip or config.query_fill:
        return ("TCT-ColBERT's input convention (markers, pool_skip, query_fill) is not sentence-transformers': "
                "encode this folder with zsdr (Encoder.from_pretrained)")
    return None


def write_st_refusal(folder: str | os.PathLike, reason: str) -> None:
    """Write the files with which sentence-transformers refuses ``folder`` with ``reason`` (module docstring)."""
    folder = Path(folder)
    files = {ST_MODULES: [{"idx": 0, "name": "0", "path": "", "type": REFUSAL_MODULE}],
             ST_MODEL_CONFIG: {"requirements": {REFUSAL_PACKAGE: {"specifier": REFUSAL_SPECIFIER, "reason": reason}}}}
    for rel, content in files.items():
        (folder / rel).write_text(json.dumps(content, indent=1) + "\n", encoding="utf-8")


def st_refusal(folder: str | os.PathLike) -> str | None:
    """The reason a folder's sentence-transformers files refuse it (:func:`write_st_refusal`), or ``None``."""
    path = Path(folder) / ST_MODEL_CONFIG
    if not path.is_file():
        return None
    try:
        need = json.loads(path.read_text(encoding="utf-8")).get("requirements", {}).get(REFUSAL_PACKAGE, {})
    except (OSError, ValueError, AttributeError):
        return None
    if isinstance(need, dict) and need.get("specifier") == REFUSAL_SPECIFIER:
        return str(need.get("reason", ""))
    return None


def st_loads(folder: str | os.PathLike) -> bool:
    """Whether ``SentenceTransformer(folder)`` gives the folder's vectors: it has the metadata, not a refusal."""
    return (Path(folder) / ST_MODULES).is_file() and st_refusal(folder) is None


def st_metadata(config: EncoderConfig, dim: int) -> dict[str, dict | list]:
    """The sentence-transformers files (relative path -> JSON content) for an encoder of ``config``.
    ANCE's ``cls_linear_ln`` head is CLS pooling, a ``Dense`` module (identity activation) and a
    ``LayerNorm`` module (eps 1e-5, as the head's); their weights are :func:`st_head_weights`'."""
    kinds = ["Transformer", "Pooling"]
    if config.pooling == "cls_linear_ln":
        kinds += ["Dense", "LayerNorm"]
    if config.normalize:
        kinds.append("Normalize")
    paths = {"Transformer": "", "Pooling": ST_POOLING_DIR}
    modules = []
    for i, kind in enumerate(kinds):
        paths.setdefault(kind, f"{i}_{kind}")
        modules.append({"idx": i, "name": str(i), "path": paths[kind], "type": f"sentence_transformers.models.{kind}"})
    cls = config.pooling in ("cls", "cls_linear_ln")
    pooling = {"word_embedding_dimension": int(dim), "pooling_mode_cls_token": cls,
               "pooling_mode_mean_tokens": config.pooling == "mean", "pooling_mode_max_tokens": False,
               "pooling_mode_mean_sqrt_len_tokens": False, "pooling_mode_weightedmean_tokens": False,
               "pooling_mode_lasttoken": False, "include_prompt": True}
    heads = {}
    if config.pooling == "cls_linear_ln":
        heads = {f"{paths['Dense']}/config.json": {"in_features": int(dim), "out_features": int(dim), "bias": True,
                                                   "activation_function": "torch.nn.modules.linear.Identity"},
                 f"{paths['LayerNorm']}/config.json": {"dimension": int(dim)}}
    return {
        ST_MODULES: modules,
        **heads,
        f"{ST_POOLING_DIR}/config.json": pooling,
        ST_CONFIG: {"max_seq_length": int(config.doc_max_length), "do_lower_case": False},
        ST_MODEL_CONFIG: {"prompts": {"query": config.query_prefix, "document": config.doc_prefix},
                          "default_prompt_name": None,
                          "similarity_fn_name": "cosine" if config.normalize else "dot"},
    }


def write_st_metadata(folder: str | os.PathLike, config: EncoderConfig, dim: int, head=None) -> None:
    """Write :func:`st_metadata` into ``folder`` (an existing, possibly temporary, model folder);
    ``head``: the encoder's :class:`~zsdr.models.heads.AnceHead` (``cls_linear_ln`` pooling)."""
    folder = Path(folder)
    for rel, content in st_metadata(config, dim).items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(content, indent=1) + "\n", encoding="utf-8")
    if config.pooling == "cls_linear_ln":
        from safetensors.torch import save_file

        if head is None:
            raise ValueError("cls_linear_ln pooling needs its head to write the sentence-transformers modules")
        state = {k: v.detach().float().cpu().contiguous() for k, v in head.state_dict().items()}
        save_file({"linear.weight": state["linear.weight"], "linear.bias": state["linear.bias"]},
                  str(folder / "2_Dense" / "model.safetensors"))
        save_file({"norm.weight": state["norm.weight"], "norm.bias": state["norm.bias"]},
                  str(folder / "3_LayerNorm" / "model.safetensors"))

"""Standalone exports of zsdr's model folders.

:func:`export_model` (``zsdr export MODEL_DIR OUT_DIR [--rem REM_DIR]``) writes a plain Hugging Face
folder that needs neither zsdr nor a second folder:

* a REM's LoRA is merged into the weights (``W + (alpha / r) B A``: exact);
* a REM's parallel adapter, ``s (W_up relu(W_down x + b_down) + b_up)``, is not linear, so it cannot
  be folded into the weights; it stays a small module defined by the folder's own ``zsdr_rem.py``
  (``model_type`` ``zsdr-rem-<type>``, loaded with ``trust_remote_code=True``; without it
  transformers refuses the folder instead of silently dropping the adapter);
* RMSC's soft tokens: the tokenizer's post-processor writes the inference context around every text
  (``[CLS] [T] x [H] [SEP]``), so any tokenizer call, and sentence-transformers, gives the ids the
  encoder gives (the context takes its room from the maximum length, as in zsdr);
* the tokenizer is copied, every path resolved, and the sentence-transformers metadata written
  (:mod:`zsdr.models.st_files`);
* ``zsdr_export.json`` says what was exported (:func:`export_info`) and the model card is written anew
  for the export (:func:`zsdr.models.cards.export_card_text`: what it holds and how to load it, the
  scores of the source's card carried over).

zsdr reads an export itself (:func:`zsdr.models.loading.read_pretrained`): its settings come from
``zsdr_export.json``, and a parallel adapter is rebuilt from the weights by zsdr's own REM code, so
the folder's ``zsdr_rem.py`` never runs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from zsdr.io import DataError, atomic_dir
from zsdr.models.settings import EXPORT_FILE, EXPORTED_REM_TYPE

if TYPE_CHECKING:  # pragma: no cover
    from zsdr.models.encoder import Encoder

REM_CODE = "zsdr_rem.py"

# BERT-style backbones the REM supports, with their transformers config and model classes.
_REM_BASES = {"bert": ("BertConfig", "BertModel"), "roberta": ("RobertaConfig", "RobertaModel"),
              "electra": ("ElectraConfig", "ElectraModel")}


def _rem_code(model_type: str) -> str:
    config_cls, model_cls = _REM_BASES[model_type]
    return f'''"""{model_cls} with DDR's parallel adapters (written by `zsdr export`; LoRA is merged in the weights).

Each layer's feed-forward output block computes LayerNorm(dropout(dense(h)) + x); the adapter
adds s * (W_up relu(W_down x + b_down) + b_up) to its residual input x, so the block computes
LayerNorm(dropout(dense(h)) + x + PA(x)). Load with trust_remote_code=True.
"""

import torch
from torch import nn
from transformers import {config_cls}, {model_cls}


class ZsdrRem{config_cls}({config_cls}):
    model_type = "zsdr-rem-{model_type}"

    def __init__(self, rem_adapter_bottleneck=0, rem_adapter_scaling=4.0, **kwargs):
        super().__init__(**kwargs)
        self.rem_adapter_bottleneck = rem_adapter_bottleneck
        self.rem_adapter_scaling = rem_adapter_scaling


class ParallelAdapter(nn.Module):
    def __init__(self, hidden_size, bottleneck, scaling):
        super().__init__()
        self.down = nn.Linear(hidden_size, bottleneck)
        self.up = nn.Linear(bottleneck, hidden_size)
        self.scaling = float(scaling)

    def forward(self, x):
        return self.scaling * self.up(torch.relu(self.down(x)))


class _ResidualAdapterHook:
    def __init__(self, adapter):
        self.adapter = adapter

    def __call__(self, module, args, kwargs):
        if len(args) >= 2:
            x = args[1]
            return (args[0], x + self.adapter(x), *args[2:]), kwargs
        x = kwargs["input_tensor"]
        return args, {{**kwargs, "input_tensor": x + self.adapter(x)}}


class ZsdrRem{model_cls}({model_cls}):
    config_class = ZsdrRem{config_cls}

    def __init__(self, config, *args, **kwargs):
        super().__init__(config, *args, **kwargs)
        self.rem_adapters = nn.ModuleList(
            ParallelAdapter(config.hidden_size, config.rem_adapter_bottleneck, config.rem_adapter_scaling)
            for _ in self.encoder.layer)
        for layer, adapter in zip(self.encoder.layer, self.rem_adapters):
            layer.output.register_forward_pre_hook(_ResidualAdapterHook(adapter), with_kwargs=True)
'''


def _soft_post_processor(tokenizer, domain: list[str], relevance: list[str]) -> None:
    """Make ``tokenizer``'s post-processor write ``domain`` after the head special tokens and
    ``relevance`` before the tail ones (the encoder's inference context)."""
    from tokenizers.processors import TemplateProcessing

    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise DataError(None, None, f"{type(tokenizer).__name__} is not a fast tokenizer",
                        "export a model whose folder has tokenizer.json")
    cls_tok, sep_tok = tokenizer.cls_token, tokenizer.sep_token
    if cls_tok is None or sep_tok is None:
        raise DataError(None, None, "the tokenizer has no CLS / SEP tokens to place the soft tokens beside",
                        "export a BERT- or RoBERTa-style model")
    roberta = backend.post_processor is not None and type(backend.post_processor).__name__ == "RobertaProcessing"
    dom, rel = " ".join(domain), " ".join(f"{t}:1" for t in relevance)
    single = f"{cls_tok} {dom} $A {' '.join(relevance)} {sep_tok}"
    if roberta:  # <s> a </s></s> b </s>
        pair = f"{cls_tok} {dom} $A {sep_tok} {sep_tok} $B:1 {rel} {sep_tok}:1"
    else:        # [CLS] a [SEP] b [SEP]
        pair = f"{cls_tok} {dom} $A {sep_tok} $B:1 {rel} {sep_tok}:1"
    names = [cls_tok, sep_tok, *domain, *relevance]
    backend.post_processor = TemplateProcessing(
        single=single, pair=pair, special_tokens=[(t, tokenizer.convert_tokens_to_ids(t)) for t in dict.fromkeys(names)])


def export_model(model: str | os.PathLike, out: str | os.PathLike, rem: str | os.PathLike | None = None,
                 **overrides) -> Path:
    """Write ``model`` (a zsdr model folder, or a DAM with ``rem``) to ``out`` as a standalone Hugging Face
    folder (module docstring); ``overrides`` are encoder settings as in ``Encoder.from_pretrained``.
    Returns ``out``; writes ``zsdr_export.json`` (what was exported, the settings, how to load it)."""
    from safetensors.torch import save_file

    from zsdr.models.adapters import bare_state_dict
    from zsdr.models.cards import export_card_text
    from zsdr.models.encoder import Encoder
    from zsdr.models.st_files import st_blocker, write_st_metadata

    enc: Encoder = Encoder.from_pretrained(model, rem=rem, merge_rem=True, **overrides)
    cfg = enc.config
    if not cfg.special_tokens or cfg.pool_skip or cfg.query_fill:
        raise DataError(model, None, f"cannot export: {st_blocker(cfg)}",
                        "encode this model with zsdr (Encoder.from_pretrained)")
    out = Path(out)
    with atomic_dir(out) as tmp:
        backbone = enc.backbone
        remote = enc.rem is not None and enc.rem.adapters is not None
        if remote:
            arch = enc.rem.arch
            if arch["model_type"] not in _REM_BASES:
                raise DataError(model, None, f"a parallel adapter on a {arch['model_type']} backbone has no export",
                                f"export a REM on {', '.join(_REM_BASES)}")
            config = backbone.config.to_dict()
            config_cls, model_cls = _REM_BASES[arch["model_type"]]
            config.update({"model_type": f"{EXPORTED_REM_TYPE}{arch['model_type']}", "architectures": [f"ZsdrRem{model_cls}"],
                           "auto_map": {"AutoConfig": f"zsdr_rem.ZsdrRem{config_cls}",
                                        "AutoModel": f"zsdr_rem.ZsdrRem{model_cls}"},
                           "rem_adapter_bottleneck": enc.rem.config.adapter_bottleneck,
                           "rem_adapter_scaling": enc.rem.config.adapter_scaling})
            config.pop("_name_or_path", None)
            (tmp / "config.json").write_text(json.dumps(config, indent=1, default=str) + "\n", encoding="utf-8")
            (tmp / REM_CODE).write_text(_rem_code(arch["model_type"]), encoding="utf-8")
            state = {k: v.detach().cpu().contiguous() for k, v in bare_state_dict(backbone).items()}
            state.update({f"rem_adapters.{k}": v.detach().cpu().contiguous()
                          for k, v in enc.rem.adapters.state_dict().items()})
            save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        else:
            backbone.save_pretrained(tmp, state_dict={k: v.detach().cpu().contiguous()
                                                      for k, v in bare_state_dict(backbone).items()})
        tokenizer = enc.tokenizer
        soft = cfg.soft
        if soft is not None:
            import copy

            tokenizer = copy.deepcopy(tokenizer)
            domain, relevance = soft.tokens(*soft.inference)
            _soft_post_processor(tokenizer, domain, relevance)
        tokenizer.save_pretrained(tmp)
        if soft is not None:
            # a model-specific tokenizer class rebuilds its own post-processor on load; the generic
            # fast tokenizer keeps tokenizer.json's, which writes the soft tokens
            tok_config = tmp / "tokenizer_config.json"
            data = json.loads(tok_config.read_text(encoding="utf-8"))
            data["tokenizer_class"] = "PreTrainedTokenizerFast"
            tok_config.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        write_st_metadata(tmp, cfg, enc.dim, head=enc.head)
        info = export_info(model, enc, remote)
        (tmp / EXPORT_FILE).write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
        readme = Path(model) / "README.md"
        source_card = readme.read_text(encoding="utf-8") if readme.is_file() else None
        (tmp / "README.md").write_text(export_card_text(Path(out).name, info, source_card), encoding="utf-8")
    return out


def export_info(model: str | os.PathLike, enc: "Encoder", remote: bool) -> dict:
    """The content of ``zsdr_export.json``: what was exported (the source folder, the REM merged into it),
    the encoder settings to load the export with (``encoder``: the tokenizer writes the soft tokens,
    so the settings have none), the REM's and the soft tokens' settings, and how to load it."""
    import torch

    cfg = enc.config
    return {"source": str(model), "rem": enc.rem_source if enc.rem is not None else None,
            "encoder": {**cfg.to_dict(), "soft_tokens": None},
            "rem_settings": None if enc.rem is None else enc.rem.config.to_dict(),
            "lora_merged": enc.rem is not None and bool(enc.rem.config.lora_r),
            "trust_remote_code": remote,
            "soft_tokens": cfg.soft_tokens,
            "soft_token_context": None if cfg.soft is None else list(cfg.soft.inference),
            "torch": torch.__version__}


def cmd_export(args) -> int:
    # MODEL_DIR itself is checked by zsdr.cli before any command runs (zsdr.models.checkpoints.check_model_folder)
    if args.rem is not None:
        if not Path(args.rem).is_dir():
            raise DataError(args.rem, None, "REM folder not found", "pass --rem the rem/ folder of a trained DDR model")
    out = Path(args.out)
    if out.exists() and not args.force:
        raise DataError(out, None, "the output folder exists", "pass a new OUT_DIR, or --force to replace it")
    export_model(args.model, out, rem=args.rem)
    print(json.dumps({"out": str(out), **json.loads((out / EXPORT_FILE).read_text(encoding="utf-8"))}, indent=1))
    return 0


def register_cli(sub) -> None:
    p = sub.add_parser("export", help="write a model folder (or a DAM + --rem) as a standalone Hugging Face / "
                                      "sentence-transformers folder")
    p.add_argument("model", metavar="MODEL_DIR", help="a zsdr model folder (models/trained/<run>, a DAM with --rem)")
    p.add_argument("out", metavar="OUT_DIR", help="the standalone folder to write (refused if it exists, unless --force)")
    p.add_argument("--rem", default=None, metavar="REM_DIR",
                   help="a REM folder to plug into MODEL_DIR (default: the model's own, if it has one)")
    p.add_argument("--force", action="store_true", help="replace OUT_DIR if it exists")
    p.set_defaults(func=cmd_export)

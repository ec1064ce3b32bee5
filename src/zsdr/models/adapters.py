"""DDR's Relevance Estimation Module (REM): LoRA plus a parallel adapter over a frozen backbone.

DDR (Zhan et al. 2022, *Disentangled Modeling of Domain and Relevance for Adaptable Dense
Retrieval*) splits a dense retriever in two: the Transformer backbone is the Domain Adaption
Module (DAM), frozen while relevance is learnt, and the REM is a small set of extra weights
trained alone and saved apart, so that it plugs into any DAM of the same architecture.

The REM has two optional parts (:class:`RemConfig`):

* **LoRA** on the self-attention ``query`` and ``value`` projections of every layer,
  ``W' = W + (alpha / r) B A`` with ``A`` random and ``B = 0`` (peft's ``"lora"`` init). It is
  injected by peft and merged into ``W`` for inference (:meth:`Rem.merge`), so it costs nothing
  at query time.
* **A parallel adapter** (:class:`ParallelAdapter`) beside the feed-forward block of every
  layer: ``PA(x) = s (W_up relu(W_down x + b_down) + b_up)`` on the block's input ``x`` (the
  attention block's output), added to the feed-forward output before the output LayerNorm:
  ``LayerNorm(dropout(dense(intermediate)) + PA(x) + x)``. ``W_up`` and ``b_up`` start at zero,
  so a fresh adapter adds nothing. The adapters live outside the backbone: a forward pre-hook on
  each layer's ``output`` block hands it ``x + PA(x)`` as its residual input, which that block
  only adds before its LayerNorm. The backbone's module tree and state-dict keys stay those of
  the plain model.

A REM folder (:meth:`Rem.save`) holds peft's ``adapter_config.json`` and
``adapter_model.safetensors`` (with LoRA), ``parallel_adapter.safetensors`` (with the adapter)
and ``rem.json``: the :class:`RemConfig` (``config``), the architecture it fits (``architecture``:
model type, hidden size, number of layers), the parameter counts (``parameters``: backbone,
LoRA, adapter, trainable) and the two shares DDR reports (``train_pct``: 100 (LoRA + adapter) /
backbone; ``infer_pct``: 100 adapter / backbone, LoRA being merged at inference). A REM saved
with its encoder (:meth:`zsdr.models.encoder.Encoder.save_pretrained`) also records ``encoder``: the
encoder settings (pooling, similarity, lengths, formats) it was trained under, which
:meth:`~zsdr.models.encoder.Encoder.from_pretrained` applies when the REM is plugged into a bare
DAM, so a DAM + REM encodes as it was trained without further arguments.

peft's ``adapter_config.json`` names the DAM the REM was trained on (``base_model_name_or_path``) as
the training job saw it: a path relative to the workflow's directory. ``PeftModel.from_pretrained``
needs the DAM model passed to it, and it loads LoRA only: the parallel adapter is ours.
``zsdr export`` (:mod:`zsdr.models.export`) writes a standalone folder with both merged in.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import math
import os
import warnings
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Iterator

import torch
from torch import nn

from zsdr.io import DataError, atomic_dir, read_json

log = logging.getLogger(__name__)

REM_FILE = "rem.json"
ADAPTER_FILE = "parallel_adapter.safetensors"
PEFT_CONFIG_FILE = "adapter_config.json"
PEFT_WEIGHTS_FILE = "adapter_model.safetensors"
REM_VERSION = 1
# Encoder settings a REM does not carry: soft tokens live in a model's tokenizer and embeddings, not in the REM.
REM_ENCODER_SKIP = ("soft_tokens",)
_LORA_MARK = "lora_"
_FIT_HINT = "a REM only plugs into a DAM of the architecture it was trained on"


@dataclass(frozen=True)
class RemConfig:
    """The REM's shape: LoRA rank (0 = none) and parallel-adapter bottleneck (0 = none).

    DDR's values are ``lora_r=192`` (``lora_alpha`` = r, scaling 1) and ``adapter_bottleneck=192``
    (hidden / 4 for a base model) with ``adapter_scaling=4.0``.
    """

    lora_r: int = 0
    lora_alpha: float | None = None  # None: equal to lora_r (scaling 1)
    lora_targets: tuple[str, ...] = ("query", "value")
    lora_dropout: float = 0.0
    adapter_bottleneck: int = 0
    adapter_scaling: float = 4.0

    def __post_init__(self):
        for name in ("lora_r", "adapter_bottleneck"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0 (0 leaves that part out), got {value!r}")
        if not self.lora_r and not self.adapter_bottleneck:
            raise ValueError("a REM needs LoRA (lora_r > 0), a parallel adapter (adapter_bottleneck > 0) or both")
        if self.lora_alpha is not None and not _positive_number(self.lora_alpha):
            raise ValueError(f"lora_alpha must be a positive number (or None for lora_r), got {self.lora_alpha!r}")
        if not _number(self.lora_dropout) or not 0.0 <= self.lora_dropout < 1.0:
            raise ValueError(f"lora_dropout must be in [0, 1), got {self.lora_dropout!r}")
        if not _positive_number(self.adapter_scaling):
            raise ValueError(f"adapter_scaling must be a positive number, got {self.adapter_scaling!r}")
        targets = self.lora_targets
        if isinstance(targets, str) or not isinstance(targets, (list, tuple)) or not targets \
                or not all(isinstance(t, str) and t for t in targets):
            raise ValueError(f"lora_targets must be a non-empty list of module names, got {targets!r}")
        object.__setattr__(self, "lora_targets", tuple(targets))

    @property
    def alpha(self) -> float:
        """LoRA's alpha (``lora_r`` when unset)."""
        return float(self.lora_r if self.lora_alpha is None else self.lora_alpha)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["lora_targets"] = list(self.lora_targets)
        return data

    @classmethod
    def from_dict(cls, data: dict, path: str | os.PathLike | None = None) -> "RemConfig":
        """A config from ``to_dict``'s output; unknown keys and bad values raise :class:`~zsdr.io.DataError`."""
        if not isinstance(data, dict):
            raise DataError(path, None, f"REM settings must be a JSON object, got {type(data).__name__}")
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise DataError(path, None, f"unknown REM settings {unknown}", f"known: {', '.join(known)}")
        try:
            return cls(**data)
        except ValueError as exc:
            raise DataError(path, None, str(exc), "fix the REM settings") from None


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _positive_number(value) -> bool:
    return _number(value) and value > 0


class ParallelAdapter(nn.Module):
    """``scaling * up(relu(down(x)))``: a bottleneck beside a feed-forward block (only its output)."""

    def __init__(self, hidden_size: int, bottleneck: int, scaling: float = 4.0, *, device=None, dtype=None):
        super().__init__()
        self.down = nn.Linear(hidden_size, bottleneck, device=device, dtype=dtype)
        self.up = nn.Linear(bottleneck, hidden_size, device=device, dtype=dtype)
        self.scaling = float(scaling)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """adapter-transformers' ``mam_adapter`` init: ``down`` like ``nn.Linear``, ``up`` and both biases zero."""
        nn.init.kaiming_uniform_(self.down.weight, a=math.sqrt(5))
        nn.init.zeros_(self.down.bias)
        nn.init.zeros_(self.up.weight)
        nn.init.zeros_(self.up.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scaling * self.up(torch.relu(self.down(x)))

    def extra_repr(self) -> str:
        return f"scaling={self.scaling}"


class _ResidualAdapterHook:
    """Forward pre-hook of a layer's feed-forward ``output`` block: its residual input ``x`` becomes
    ``x + PA(x)``, which that block adds to ``dropout(dense(h))`` before its LayerNorm.

    A callable object (not a closure), so a deep copy of the model that owns the adapter rebinds it.
    """

    def __init__(self, adapter: ParallelAdapter):
        self.adapter = adapter

    def __call__(self, module: nn.Module, args: tuple, kwargs: dict):
        if len(args) >= 2:
            x = args[1]
            return (args[0], x + self.adapter(x), *args[2:]), kwargs
        if "input_tensor" in kwargs:
            x = kwargs["input_tensor"]
            return args, {**kwargs, "input_tensor": x + self.adapter(x)}
        raise RuntimeError(f"{type(module).__name__} was called without its residual input (input_tensor)")


# ------------------------------------------------------------------------------ architecture
def _model_type(backbone: nn.Module) -> str:
    return str(getattr(getattr(backbone, "config", None), "model_type", "") or type(backbone).__name__)


def encoder_layers(backbone: nn.Module) -> nn.ModuleList:
    """The Transformer layers of a BERT-style backbone (``backbone.encoder.layer``)."""
    base = getattr(backbone, "base_model", backbone)
    layers = getattr(getattr(base, "encoder", None), "layer", None)
    if not isinstance(layers, nn.ModuleList) or len(layers) == 0:
        raise ValueError(f"{_model_type(backbone)} ({type(backbone).__name__}) has no encoder.layer list: the REM "
                         "supports BERT-style encoders (BERT, RoBERTa, ELECTRA)")
    return layers


def architecture(backbone: nn.Module) -> dict:
    """``model_type``, ``hidden_size`` and ``num_layers`` of a backbone: what a REM must fit."""
    layers = encoder_layers(backbone)
    hidden = getattr(getattr(backbone, "config", None), "hidden_size", None)
    if not hidden:
        hidden = backbone.get_input_embeddings().embedding_dim
    return {"model_type": _model_type(backbone), "hidden_size": int(hidden), "num_layers": len(layers)}


def _ffn_outputs(backbone: nn.Module) -> list[nn.Module]:
    """Each layer's feed-forward output block, checked to be ``LayerNorm(dropout(dense(h)) + input_tensor)``."""
    arch = architecture(backbone)
    name = f"{arch['model_type']} ({type(backbone).__name__})"
    outputs = []
    for i, layer in enumerate(encoder_layers(backbone)):
        out = getattr(layer, "output", None)
        missing = [a for a in ("dense", "dropout", "LayerNorm") if not isinstance(getattr(out, a, None), nn.Module)]
        if out is None or missing:
            raise ValueError(f"{name}: layer {i} has no feed-forward output block with dense / dropout / LayerNorm "
                             f"(missing: {', '.join(missing) if out is not None else 'output'}); the parallel "
                             "adapter supports BERT-style layers (BERT, RoBERTa, ELECTRA)")
        params = list(inspect.signature(out.forward).parameters)[:2]
        if params != ["hidden_states", "input_tensor"]:
            raise ValueError(f"{name}: layer {i}'s output block takes {params}, not (hidden_states, input_tensor); "
                             "the parallel adapter supports BERT-style layers (BERT, RoBERTa, ELECTRA)")
        if getattr(out.dense, "out_features", arch["hidden_size"]) != arch["hidden_size"]:
            raise ValueError(f"{name}: layer {i}'s output block does not project to the hidden size "
                             f"{arch['hidden_size']}")
        outputs.append(out)
    _probe_ffn_output(outputs[0], name)
    return outputs


def _probe_ffn_output(out: nn.Module, name: str) -> None:
    """Check on a random input that the block computes ``LayerNorm(dense(h) + x)`` (without dropout)."""
    weight = out.dense.weight
    if weight.device.type == "meta":
        return
    generator = torch.Generator().manual_seed(0)
    h = torch.randn(1, 2, out.dense.in_features, generator=generator).to(weight)
    x = torch.randn(1, 2, out.dense.out_features, generator=generator).to(weight)
    was_training = out.training
    out.eval()
    try:
        with torch.no_grad():
            got = out(h, x)
            want = out.LayerNorm(out.dense(h) + x)
    finally:
        out.train(was_training)
    if not torch.allclose(got, want, rtol=1e-3, atol=1e-4):
        raise ValueError(f"{name}: the feed-forward output block does not compute LayerNorm(dense(h) + input_tensor); "
                         "the parallel adapter supports BERT-style layers (BERT, RoBERTa, ELECTRA)")


def _check_fits(saved: dict, arch: dict, folder: Path) -> None:
    wrong = [f"{key} {saved.get(key)} (this backbone: {arch[key]})" for key in ("hidden_size", "num_layers")
             if saved.get(key) != arch[key]]
    if wrong:
        raise DataError(folder, None, f"the REM was trained on a {saved.get('model_type')} backbone that does not fit "
                        f"this {arch['model_type']} backbone: {'; '.join(wrong)}", _FIT_HINT)
    if saved.get("model_type") != arch["model_type"]:
        log.warning("%s: REM trained on a %s backbone, plugged into a %s backbone of the same shape", folder,
                    saved.get("model_type"), arch["model_type"])


@contextlib.contextmanager
def _quiet_peft():
    """peft touches deprecated transformers attributes: keep their FutureWarnings out of the logs."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        yield


def _lora_config(config: RemConfig, trainable: bool = True):
    from peft import LoraConfig

    alpha = config.alpha
    return LoraConfig(r=config.lora_r, lora_alpha=int(alpha) if alpha.is_integer() else alpha,
                      target_modules=list(config.lora_targets), lora_dropout=config.lora_dropout, bias="none",
                      init_lora_weights=True, inference_mode=not trainable)


# ------------------------------------------------------------------------------------ the REM
class Rem(nn.Module):
    """A REM attached to a backbone (made by :func:`attach_rem` or :func:`load_rem`).

    LoRA's weights sit inside the backbone (peft replaces the targeted ``nn.Linear`` by LoRA
    layers holding ``base_layer``, ``lora_A`` and ``lora_B``); the parallel adapters are this
    module's ``adapters``. Register the REM as a submodule beside the backbone (as
    :class:`~zsdr.models.encoder.Encoder` does) so that ``.to()``, optimisers and state dicts
    see the adapters; the backbone itself is only referenced, not registered, here.
    """

    def __init__(self, backbone: nn.Module, config: RemConfig):
        super().__init__()
        self.config = config
        self.arch = architecture(backbone)
        self.__dict__["_backbone"] = backbone  # not a submodule: the owner registers the backbone
        self.__dict__["_peft"] = None  # the PeftModel wrapping the backbone while LoRA is unmerged
        self.lora_merged = False
        self._lora_count = 0
        self._backbone_keys = tuple(backbone.state_dict())
        self._hooks: list = []
        self.adapters: nn.ModuleList | None = None
        outputs = _ffn_outputs(backbone) if config.adapter_bottleneck else []
        if outputs:
            ref = next(backbone.parameters())
            self.adapters = nn.ModuleList(
                ParallelAdapter(self.arch["hidden_size"], config.adapter_bottleneck, config.adapter_scaling,
                                device=ref.device, dtype=ref.dtype) for _ in outputs)
            self._hooks = [out.register_forward_pre_hook(_ResidualAdapterHook(adapter), with_kwargs=True)
                           for out, adapter in zip(outputs, self.adapters)]

    @property
    def backbone(self) -> nn.Module:
        return self.__dict__["_backbone"]

    def _set_peft(self, peft_model) -> None:
        self.__dict__["_peft"] = peft_model
        self._lora_count = sum(p.numel() for _, p in self.named_lora_parameters())

    # --------------------------------------------------------------------------- parameters
    def named_lora_parameters(self) -> Iterator[tuple[str, nn.Parameter]]:
        """LoRA's parameters, named as in the backbone (none once merged)."""
        for name, p in self.backbone.named_parameters():
            if _LORA_MARK in name:
                yield name, p

    def named_rem_parameters(self) -> Iterator[tuple[str, nn.Parameter]]:
        """Every REM parameter: LoRA's (``backbone``-relative names) then the adapters' (``adapters.*``)."""
        yield from self.named_lora_parameters()
        if self.adapters is not None:
            yield from self.adapters.named_parameters(prefix="adapters")

    def parameter_counts(self) -> dict:
        """:func:`count_parameters` of this REM (LoRA counted as it was before a merge)."""
        return count_parameters(self.backbone, self)

    def describe(self) -> dict:
        return {**self.config.to_dict(), "lora_merged": self.lora_merged, **self.parameter_counts()}

    # ------------------------------------------------------------------------------ merging
    def merge(self) -> "Rem":
        """Merge LoRA into the backbone's weights (inference; irreversible). The adapters stay."""
        if self.__dict__["_peft"] is not None:
            with _quiet_peft():
                self.__dict__["_peft"].merge_and_unload()
            self.__dict__["_peft"] = None
            self.lora_merged = True
        return self

    def remove(self) -> None:
        """Detach the adapters' hooks (LoRA, merged or not, stays in the backbone)."""
        for handle in self._hooks:
            handle.remove()
        self._hooks = []

    # ------------------------------------------------------------------------------- saving
    def save(self, directory: str | os.PathLike, encoder: dict | None = None) -> Path:
        """Write the REM to ``directory`` atomically (see the module docstring for the files)."""
        directory = Path(directory)
        with atomic_dir(directory) as tmp:
            self.write(tmp, encoder=encoder)
        return directory

    def write(self, folder: Path, encoder: dict | None = None) -> None:
        """Write the REM's files into an existing (temporary) ``folder``; :meth:`save` is the atomic form.
        ``encoder``: the encoder settings the REM was trained under, recorded in ``rem.json``."""
        if self.lora_merged:
            raise ValueError("this REM's LoRA is merged into the backbone weights and can no longer be saved apart; "
                             "save the REM before merging (load with merge_rem=False to keep it unmerged)")
        folder = Path(folder)
        files = []
        if self.config.lora_r:
            with _quiet_peft():
                self.__dict__["_peft"].save_pretrained(str(folder))
            (folder / "README.md").unlink(missing_ok=True)  # peft's blank model card
            files += [PEFT_CONFIG_FILE, PEFT_WEIGHTS_FILE]
        if self.adapters is not None:
            from safetensors.torch import save_file

            save_file({k: v.detach().cpu().contiguous() for k, v in self.adapters.state_dict().items()},
                      str(folder / ADAPTER_FILE))
            files.append(ADAPTER_FILE)
        counts = self.parameter_counts()
        info = {"version": REM_VERSION, "config": self.config.to_dict(), "architecture": self.arch,
                "parameters": {k: counts[k] for k in ("backbone", "lora", "adapter", "trainable")},
                "train_pct": counts["train_pct"], "infer_pct": counts["infer_pct"], "files": files}
        if encoder is not None:
            info["encoder"] = {k: v for k, v in encoder.items() if k not in REM_ENCODER_SKIP}
        (folder / REM_FILE).write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")


def count_parameters(backbone: nn.Module, rem: Rem | None = None) -> dict:
    """Parameter counts: the backbone (DAM) ``N`` without LoRA, LoRA ``L``, adapters ``P``.

    ``train_pct`` = 100 (L + P) / N, what DDR trains; ``infer_pct`` = 100 P / N, what
    it adds at inference once LoRA is merged into the weights.
    """
    total = lora = 0
    for name, p in backbone.named_parameters():
        total += p.numel()
        if _LORA_MARK in name:
            lora += p.numel()
    if rem is not None and rem.lora_merged:
        lora_count = rem._lora_count
    else:
        lora_count = lora
    adapter = sum(p.numel() for p in rem.adapters.parameters()) if rem is not None and rem.adapters is not None else 0
    n = total - lora
    return {"backbone": n, "lora": lora_count, "adapter": adapter, "trainable": lora_count + adapter,
            "train_pct": 100.0 * (lora_count + adapter) / n, "infer_pct": 100.0 * adapter / n}


def bare_state_dict(backbone: nn.Module, rem: Rem | None = None) -> dict[str, torch.Tensor]:
    """The backbone's weights under its plain Hugging Face keys, without LoRA (the DAM alone).

    Unmerged LoRA layers keep the original weight as ``<module>.base_layer.weight``; the live
    model is not changed.
    """
    out = {}
    for key, value in backbone.state_dict().items():
        if _LORA_MARK in key:
            continue
        out[key.replace(".base_layer.", ".")] = value
    if rem is not None and set(out) != set(rem._backbone_keys):
        diff = sorted(set(out) ^ set(rem._backbone_keys))
        raise RuntimeError(f"cannot separate the backbone from the REM: keys differ from the plain model's "
                           f"({diff[:3]})")
    return out


# ------------------------------------------------------------------------- attach / load
def _freeze(module: nn.Module) -> None:
    for p in module.parameters():
        p.requires_grad_(False)


def attach_rem(backbone: nn.Module, config: RemConfig) -> Rem:
    """Freeze every backbone parameter and attach a new REM (LoRA ``B = 0``, adapter ``up = 0``:
    the model computes exactly what it did). Only the REM's parameters require gradients."""
    from peft import get_peft_model

    if hasattr(backbone, "peft_config"):
        raise ValueError("this backbone already carries peft adapters; attach a REM to a plain backbone")
    rem = Rem(backbone, config)  # checks the architecture before anything changes
    _freeze(backbone)
    if config.lora_r:
        with _quiet_peft():
            rem._set_peft(get_peft_model(backbone, _lora_config(config)))
    for _, p in rem.named_rem_parameters():
        p.requires_grad_(True)
    return rem


def rem_with_adapters(backbone: nn.Module, config: RemConfig, adapters: dict[str, torch.Tensor],
                      where: str | os.PathLike | None = None) -> Rem:
    """A REM of parallel adapters alone, with the weights ``adapters`` (``<layer>.down.weight`` ...), on a
    backbone whose LoRA, if the REM had one, is already merged into its weights: what ``zsdr export``
    writes. Frozen (inference). DataError naming ``where`` when the weights do not fit."""
    if config.lora_r or not config.adapter_bottleneck:
        raise ValueError("rem_with_adapters takes parallel adapters only (lora_r 0, adapter_bottleneck > 0)")
    rem = attach_rem(backbone, config)
    try:
        rem.adapters.load_state_dict(adapters, strict=True)
    except RuntimeError as exc:
        raise DataError(where, None, f"the parallel adapter's weights do not fit the model "
                        f"({' '.join(str(exc).split())[:300]})", "export the model again with `zsdr export`") from None
    for _, p in rem.named_rem_parameters():
        p.requires_grad_(False)
    return rem


def read_rem_info(path: str | os.PathLike) -> tuple[RemConfig, dict]:
    """The :class:`RemConfig` and the whole ``rem.json`` of a REM folder (validated)."""
    folder = Path(path)
    if not folder.is_dir():
        raise DataError(folder, None, "REM folder not found", "pass a folder written by Rem.save or save_pretrained")
    info = read_json(folder / REM_FILE, "save the REM again (Rem.save or Encoder.save_pretrained)")
    config = RemConfig.from_dict(info.get("config"), folder / REM_FILE)
    arch = info.get("architecture")
    if not isinstance(arch, dict) or not {"hidden_size", "num_layers"} <= set(arch):
        raise DataError(folder / REM_FILE, None, "no architecture (hidden_size, num_layers)",
                        "save the REM again (Rem.save or Encoder.save_pretrained)")
    needed = ([PEFT_CONFIG_FILE, PEFT_WEIGHTS_FILE] if config.lora_r else []) + \
             ([ADAPTER_FILE] if config.adapter_bottleneck else [])
    missing = [f for f in needed if not (folder / f).is_file()]
    if missing:
        raise DataError(folder, None, f"REM files missing: {', '.join(missing)}", "save the REM again")
    return config, info


def rem_encoder_settings(path: str | os.PathLike) -> dict:
    """The encoder settings a REM was trained under: ``encoder`` of its ``rem.json``; for a REM saved
    before that was recorded, the ``zsdr.json`` of the model folder that holds it as its own REM
    (``"rem": "<this folder's name>"``); empty otherwise (a converted release)."""
    folder = Path(path)
    _, info = read_rem_info(folder)
    settings = info.get("encoder")
    owner = folder.resolve().parent / "zsdr.json"
    if settings is None and owner.is_file():
        saved = read_json(owner, "save the model again (Encoder.save_pretrained)")
        if saved.get("rem") == folder.resolve().name:
            settings = {k: v for k, v in saved.items() if k not in ("version", "backbone", "rem", "retrieval")}
            settings.update(saved.get("retrieval") or {})
    settings = settings or {}
    if not isinstance(settings, dict):
        raise DataError(Path(path) / REM_FILE, None, f"encoder must be a JSON object, got {settings!r}",
                        "save the REM again (Encoder.save_pretrained)")
    return {k: v for k, v in settings.items() if k not in REM_ENCODER_SKIP}


def _check_peft_config(folder: Path, config: RemConfig) -> None:
    saved = read_json(folder / PEFT_CONFIG_FILE, "save the REM again")
    found = {"r": saved.get("r"), "lora_alpha": saved.get("lora_alpha"),
             "target_modules": sorted(saved.get("target_modules") or [])}
    want = {"r": config.lora_r, "lora_alpha": config.alpha, "target_modules": sorted(config.lora_targets)}
    if found != want:
        raise DataError(folder / PEFT_CONFIG_FILE, None, f"LoRA settings {found} disagree with rem.json's {want}",
                        "save the REM again")


def _check_adapter_weights(weights: dict, config: RemConfig, arch: dict, path: Path) -> None:
    d, b = arch["hidden_size"], config.adapter_bottleneck
    want = {}
    for i in range(arch["num_layers"]):
        want.update({f"{i}.down.weight": (b, d), f"{i}.down.bias": (b,), f"{i}.up.weight": (d, b),
                     f"{i}.up.bias": (d,)})
    found = {k: tuple(v.shape) for k, v in weights.items()}
    if found != want:
        wrong = sorted(k for k in set(want) | set(found) if want.get(k) != found.get(k))
        raise DataError(path, None, f"adapter weights do not fit hidden size {d}, bottleneck {b}, {arch['num_layers']} "
                        f"layers (e.g. {wrong[0]}: saved {found.get(wrong[0])}, expected {want.get(wrong[0])})",
                        _FIT_HINT)


def load_rem(backbone: nn.Module, path: str | os.PathLike, trainable: bool = False) -> Rem:
    """Plug the REM saved in ``path`` into ``backbone`` (any DAM of the same architecture).

    The backbone is frozen; with ``trainable`` the REM's parameters require gradients (to train
    it further), else nothing does. LoRA stays unmerged: call :meth:`Rem.merge` for inference.
    The global random state is left as it was (every weight comes from the files).
    """
    from peft import PeftModel
    from safetensors.torch import load_file

    folder = Path(path)
    config, info = read_rem_info(folder)
    arch = architecture(backbone)
    _check_fits(info["architecture"], arch, folder)
    if hasattr(backbone, "peft_config"):
        raise ValueError("this backbone already carries peft adapters; load a REM onto a plain backbone")
    if config.lora_r:
        _check_peft_config(folder, config)
    weights = None
    if config.adapter_bottleneck:
        weights = load_file(str(folder / ADAPTER_FILE))
        _check_adapter_weights(weights, config, arch, folder / ADAPTER_FILE)
    # Every check is done: now the backbone changes.
    ref = next(backbone.parameters())
    devices = [ref.device] if ref.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):  # fresh weights are overwritten by the saved ones
        rem = Rem(backbone, config)
        _freeze(backbone)
        if config.lora_r:
            with _quiet_peft():
                rem._set_peft(PeftModel.from_pretrained(backbone, str(folder), is_trainable=trainable))
    if rem.adapters is not None:
        rem.adapters.load_state_dict({k: v.to(ref.device) for k, v in weights.items()})
    for _, p in rem.named_rem_parameters():
        p.requires_grad_(trainable)
    saved = info.get("parameters") or {}
    counts = rem.parameter_counts()
    for key in ("lora", "adapter"):
        if key in saved and saved[key] != counts[key]:
            raise DataError(folder, None, f"{key} parameters loaded: {counts[key]}, saved: {saved[key]}",
                            _FIT_HINT)
    return rem


def rem_settings(value: Any) -> RemConfig:
    """A :class:`RemConfig` from itself or a dict (for callers that take either)."""
    if isinstance(value, RemConfig):
        return value
    if isinstance(value, dict):
        return RemConfig.from_dict(value)
    raise TypeError(f"expected a RemConfig or a dict of its fields, got {type(value).__name__}")

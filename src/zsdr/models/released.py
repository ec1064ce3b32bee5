"""Released checkpoints that are not Hugging Face repositories, converted into the project's formats.

Three kinds of release are archives the authors host themselves:

* **ANCE-format checkpoints** (``kind: ance``): the ANCE warmup (MoDIR's DPR) and MoDIR's
  TREC-COVID checkpoints. Each holds a ``config.json`` and a PyTorch state dict of ANCE's
  ``RobertaDot_NLL_LN``: the RoBERTa weights under ``roberta.``, the projection
  ``embeddingHead`` and its LayerNorm ``norm`` (pyserini's AnceEncoder reads the same keys), and no
  tokenizer (ANCE uses ``roberta-base``'s). :func:`convert_ance` writes an :class:`Encoder` folder:
  the backbone, the tokenizer, ``head.safetensors`` and ``zsdr.json`` (``cls_linear_ln``, dot).
* **DDR's REMs** (``kind: adapter-rem``): ``lora192-pa4.zip`` of each
  ``jingtao/REM-bert_base-dense-*`` repository, saved by adapter-transformers (``save_adapter``:
  ``adapter_config.json`` with a LoRA + parallel-adapter ``union`` config, ``pytorch_adapter.bin``
  with ``...attention.self.{query,value}.loras.<name>.lora_{A,B}`` and
  ``...output.adapters.<name>.adapter_{down.0,up}.{weight,bias}``). :func:`convert_adapter_rem`
  rewrites it as the project's REM folder (:mod:`zsdr.models.adapters`), which plugs into any DAM
  of the architecture, merged LoRA included. Every tensor of the release must find its place and
  every setting must be one the REM reproduces, else the conversion stops naming what does not fit.

* **Condenser** (``kind: condenser``): Gao & Callan's ``condenser.tar.gz``, the checkpoint COCO-DR's COCO
  pretraining starts from [C-RM OpenMatch/COCO-DR ``COCO/README.md``]: a ``BertForMaskedLM`` folder
  (``config.json``, ``pytorch_model.bin``) and ``model.pt``, whose ``c_head.*`` tensors are the Condenser
  head (``CondenserForPretraining.save_pretrained``). The hub copy ``Luyu/condenser`` holds the backbone
  only (:data:`KNOWN_CHECKPOINTS`). :func:`convert_condenser` writes the masked LM, the tokenizer and
  ``model.pt`` (the head, which COCO pretraining continues: ``zsdr.pretrain.coco.find_condenser_head``).

:data:`RELEASES` lists the archives (URL, kind, what they need); :func:`convert` dispatches.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from zsdr.io import DataError

log = logging.getLogger(__name__)

KINDS = ("ance", "adapter-rem", "condenser")
_ANCE_BLOB = "https://webdatamltrainingdiag842.blob.core.windows.net/semistructstore/OpenSource"
_MODIR = "https://git.uwaterloo.ca/j9xin/modir-release/-/raw/master/checkpoints"
_DDR_REM = "https://huggingface.co/jingtao/REM-bert_base-dense-{}/resolve/main/lora192-pa4.zip"
_HUB_FILE = re.compile(r"^https://huggingface\.co/([^/]+/[^/]+)/resolve/main/(.+)$")


@dataclass(frozen=True)
class Release:
    name: str
    url: str
    kind: str
    needs: str          # ance: the tokenizer (hub id); adapter-rem: a model whose config.json gives the architecture
    description: str

    @property
    def hub_file(self) -> tuple[str, str] | None:
        """``(repo id, file name)`` of an archive kept in a Hugging Face repository (DDR's REMs): it is read
        through the Hugging Face cache like any hub file (offline too), not downloaded by the pipeline."""
        m = _HUB_FILE.match(self.url)
        return (m.group(1), m.group(2)) if m else None


RELEASES: dict[str, Release] = {r.name: r for r in [
    Release("ance-warmup", f"{_ANCE_BLOB}/warmup_checpoint.zip", "ance", "roberta-base",
            "ANCE's BM25-negative warmup checkpoint (MoDIR Table 1's DPR, DPR+MoDIR's init)"),
    Release("ance-firstp", f"{_ANCE_BLOB}/Passage_ANCE_FirstP_Checkpoint.zip", "ance", "roberta-base",
            "ANCE FirstP passage checkpoint as released (castorini/ance-msmarco-passage is its conversion)"),
    Release("modir-treccovid-10k", f"{_MODIR}/modir-treccovid-10k.zip", "ance", "roberta-base",
            "MoDIR's released ANCE+MoDIR checkpoint for TREC-COVID after 10k steps"),
    Release("modir-treccovid-50k", f"{_MODIR}/modir-treccovid-50k.zip", "ance", "roberta-base",
            "MoDIR's released ANCE+MoDIR checkpoint for TREC-COVID after 50k steps"),
    Release("condenser", "https://boston.lti.cs.cmu.edu/luyug/condenser/condenser.tar.gz", "condenser",
            "bert-base-uncased", "Condenser (Gao & Callan 2021) with its head (model.pt): COCO-DR's COCO init"),
    *[Release(f"ddr-rem-{loss}-{source}", _DDR_REM.format(f"{loss}-{source}"), "adapter-rem",
              "bert-base-uncased" if source == "msmarco" else "bert-base-chinese",
              f"DDR's released REM ({'contrastive' if loss == 'contrast' else 'distilled'}, trained on {source})")
      for loss in ("contrast", "distil") for source in ("msmarco", "dureader")],
]}


# Hub checkpoints whose content the plan checks before any job runs: which heads they carry beside the backbone.
# `condenser_head: False`: no Condenser head (no model.pt), so COCO pretraining cannot continue it; `ance_head`:
# whether ANCE's linear + LayerNorm projection (cls_linear_ln pooling) comes with it.
KNOWN_CHECKPOINTS: dict[str, dict] = {
    "Luyu/condenser": {"condenser_head": False, "ance_head": False,
                       "instead": "the release `condenser` (condenser.tar.gz, with model.pt)",
                       "note": "the hub copy holds the BERT backbone only"},
    "roberta-base": {"condenser_head": False, "ance_head": False, "note": "a plain RoBERTa"},
    "bert-base-uncased": {"condenser_head": False, "ance_head": False, "note": "a plain BERT"},
    "castorini/ance-msmarco-passage": {"ance_head": True, "note": "ANCE FirstP with its projection"},
}


def _inside(target: Path, scratch: Path) -> bool:
    root = scratch.resolve()
    target = target.resolve()
    return target == root or str(target).startswith(str(root) + os.sep)


def _unpacked(source: str | os.PathLike, scratch: Path) -> Path:
    """``source`` itself when it is a folder, else the zip or tar archive extracted (safely: no member outside
    ``scratch``, no links) into ``scratch``."""
    from zsdr.data.archives import ExpansionLimit

    source = Path(source)
    if source.is_dir():
        return source
    if source.name.endswith((".tar.gz", ".tgz", ".tar")):
        import tarfile

        try:
            with tarfile.open(source) as archive:
                members, expansion = archive.getmembers(), ExpansionLimit(source)
                for m in members:
                    expansion.add(m.size if m.isfile() else 0)   # a decompression bomb: refused before writing
                    if not (m.isfile() or m.isdir()) or not _inside(scratch / m.name, scratch):
                        raise DataError(source, None, f"archive member {m.name!r} is a link or points outside the archive",
                                        "download the release again from its source")
                archive.extractall(scratch, members=members, filter="data")
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise DataError(source, None, f"not a readable tar archive ({exc})", "download the release again") from None
        return scratch
    try:
        with zipfile.ZipFile(source) as archive:
            expansion = ExpansionLimit(source)
            for info in archive.infolist():
                expansion.add(info.file_size)   # the sizes it declares (zipfile reads no more than them)
                target = (scratch / info.filename).resolve()
                if not str(target).startswith(str(scratch.resolve()) + os.sep) and target != scratch.resolve():
                    raise DataError(source, None, f"archive member {info.filename!r} points outside the archive",
                                    "download the release again from its source")
            archive.extractall(scratch)
    except (zipfile.BadZipFile, OSError) as exc:
        raise DataError(source, None, f"not a readable zip archive ({exc})", "download the release again") from None
    return scratch


def _one(root: Path, patterns: tuple[str, ...], what: str, where: Path) -> Path:
    found = sorted({p for pattern in patterns for p in root.rglob(pattern) if p.is_file()})
    if len(found) != 1:
        listing = ", ".join(str(p.relative_to(root)) for p in found) or "none"
        raise DataError(where, None, f"expected one {what} in the release, found {listing}",
                        "pass the release archive as published (or its extracted folder)")
    return found[0]


def _named(path: Path, root: Path, source: str | os.PathLike) -> Path:
    """How an error names a file of the release: inside the archive as given, not the scratch copy."""
    return Path(source) / path.relative_to(root) if not Path(source).is_dir() else path


# ----------------------------------------------------------------------------------- ANCE
def convert_ance(source: str | os.PathLike, out: str | os.PathLike, tokenizer: str,
                 query_max_length: int = 64, doc_max_length: int = 512) -> Path:
    """An ANCE-format release (zip or folder) as an :class:`~zsdr.models.encoder.Encoder` folder."""
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    from zsdr.models.checkpoints import read_tensors
    from zsdr.models.encoder import Encoder
    from zsdr.models.loading import quiet_transformers
    from zsdr.models.settings import EncoderConfig

    with tempfile.TemporaryDirectory() as scratch:
        root = _unpacked(source, Path(scratch))
        config_file = _one(root, ("config.json",), "config.json", Path(source))
        found = _one(root, ("pytorch_model.bin", "*.safetensors"), "weight file (pytorch_model.bin)", Path(source))
        weights = _named(found, root, source)
        state = read_tensors([found], lambda k: True)
        heads = [k[: -len("embeddingHead.weight")] for k in state if k.endswith("embeddingHead.weight")]
        if len(heads) != 1:
            raise DataError(weights, None, f"found {len(heads)} ANCE heads (embeddingHead.weight) in the weights",
                            "this is not an ANCE-format checkpoint (RobertaDot_NLL_LN)")
        prefix = heads[0]
        head = {new: state.pop(prefix + old, None) for old, new in
                (("embeddingHead.weight", "linear.weight"), ("embeddingHead.bias", "linear.bias"),
                 ("norm.weight", "norm.weight"), ("norm.bias", "norm.bias"))}
        if any(v is None for v in head.values()):
            raise DataError(weights, None, f"the ANCE head is incomplete ({sorted(k for k, v in head.items() if v is None)})",
                            "download the release again")
        body = f"{prefix}roberta."
        backbone_state = {k[len(body):]: v for k, v in state.items() if k.startswith(body)}
        config = AutoConfig.from_pretrained(str(config_file.parent))
        with quiet_transformers():
            backbone = AutoModel.from_config(config, add_pooling_layer=False)
        own = backbone.state_dict()
        missing = sorted(k for k in own if k not in backbone_state and not k.endswith("position_ids"))
        if missing:
            raise DataError(weights, None, f"{len(missing)} backbone weights missing (e.g. {missing[0]})",
                            "download the release again")
        unused = sorted(k for k in state if not k.startswith(body) and not k.startswith(prefix + "roberta.pooler"))
        if unused:
            log.info("%s: %d tensors beside the encoder left out (e.g. %s)", weights, len(unused), unused[0])
        backbone.load_state_dict({k: v for k, v in backbone_state.items() if k in own}, strict=False)  # all checked above
        tok = AutoTokenizer.from_pretrained(tokenizer)
        settings = EncoderConfig(pooling="cls_linear_ln", similarity="dot", query_max_length=query_max_length,
                                 doc_max_length=doc_max_length, doc_format="text")
        encoder = Encoder(backbone, tok, settings, name_or_path=f"{Path(source).name} (ANCE release)")
        encoder.head.load_state_dict(head)
        encoder.save_pretrained(out)
    return Path(out)


# -------------------------------------------------------------------------------------- Condenser
def convert_condenser(source: str | os.PathLike, out: str | os.PathLike, tokenizer: str) -> Path:
    """The Condenser release (``condenser.tar.gz`` or its extracted folder) as a model folder: the masked LM
    (backbone and MLM head), the tokenizer (the release's own, else ``tokenizer``'s) and ``model.pt`` holding
    the Condenser head's ``c_head.*`` tensors. A release without that head is refused: COCO pretraining
    continues it."""
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from zsdr.models.checkpoints import read_tensors
    from zsdr.models.loading import quiet_transformers

    with tempfile.TemporaryDirectory() as scratch:
        root = _unpacked(source, Path(scratch))
        config_file = _one(root, ("config.json",), "config.json", Path(source))
        folder = config_file.parent
        head_file = _one(root, ("model.pt",), "Condenser head (model.pt)", Path(source))
        head = read_tensors([head_file], lambda k: k.startswith("c_head."))
        if not head:
            raise DataError(_named(head_file, root, source), None, "holds no c_head.* tensors (no Condenser head)",
                            "pass Gao & Callan's condenser.tar.gz, whose model.pt carries the head")
        with quiet_transformers():
            model = AutoModelForMaskedLM.from_pretrained(str(folder))
        has_vocab = any((folder / f).is_file() for f in ("tokenizer.json", "vocab.txt"))
        tok = AutoTokenizer.from_pretrained(str(folder) if has_vocab else tokenizer)
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(out)
        tok.save_pretrained(out)
        torch.save(head, out / "model.pt")
        log.info("%s: masked LM, tokenizer and a %d-tensor Condenser head written to %s", source, len(head), out)
    return out


# ----------------------------------------------------------------------- adapter-transformers REM
_LORA_KEY = re.compile(r"(?:^|\.)layer\.(\d+)\.attention\.self\.(query|key|value)\.loras\.([^.]+)\.lora_([AB])$")
_ADAPTER_KEY = re.compile(r"(?:^|\.)layer\.(\d+)\.output\.adapters\.([^.]+)\.adapter_(down\.0|up)\.(weight|bias)$")
_MATRICES = {"q": "query", "k": "key", "v": "value"}


def _adapter_parts(config: dict, where: Path) -> tuple[dict | None, dict | None]:
    """The LoRA and the parallel-adapter settings of an adapter-transformers config (``union`` or one)."""
    parts = config.get("configs") if config.get("architecture") == "union" else [config]
    lora = parallel = None
    for part in parts or []:
        if part.get("architecture") == "lora":
            lora = part
        elif part.get("is_parallel"):
            parallel = part
        else:
            raise DataError(where, None, f"adapter part {part.get('architecture') or part} is neither LoRA nor a "
                            "parallel adapter", "only DDR's LoRA + parallel-adapter REMs convert")
    if lora is None and parallel is None:
        raise DataError(where, None, "no LoRA or parallel adapter in the adapter config", "pass one of DDR's REMs")
    return lora, parallel


def _refuse(where: Path, part: str, checks: dict) -> None:
    bad = {k: v for k, v in checks.items() if v}
    if bad:
        raise DataError(where, None, f"{part} settings the REM does not reproduce: {bad}",
                        "only LoRA on the self-attention projections and a ReLU parallel adapter after the "
                        "feed-forward block convert")


def convert_adapter_rem(source: str | os.PathLike, out: str | os.PathLike, architecture_from: str) -> Path:
    """A DDR REM saved by adapter-transformers (zip or folder) as the project's REM folder.

    ``architecture_from``: a model (hub id or folder) whose ``config.json`` has the DAM's architecture
    (only the configuration is read: the REM is written apart from any weights)."""
    from transformers import AutoConfig, AutoModel

    from zsdr.models.adapters import RemConfig, attach_rem
    from zsdr.models.checkpoints import read_tensors
    from zsdr.models.loading import quiet_transformers

    with tempfile.TemporaryDirectory() as scratch:
        root = _unpacked(source, Path(scratch))
        config_found = _one(root, ("adapter_config.json",), "adapter_config.json", Path(source))
        config_file = _named(config_found, root, source)
        found = _one(root, ("pytorch_adapter.bin",), "pytorch_adapter.bin", Path(source))
        weights = _named(found, root, source)
        try:
            info = json.loads(config_found.read_text(encoding="utf-8"))
            adapter = info["config"]
        except (OSError, ValueError, KeyError) as exc:
            raise DataError(config_file, None, f"unreadable adapter config ({exc})", "download the release again") from None
        lora, parallel = _adapter_parts(adapter, config_file)
        arch = AutoConfig.from_pretrained(architecture_from)
        hidden = int(arch.hidden_size)
        if info.get("hidden_size") not in (None, hidden):
            raise DataError(config_file, None, f"the REM was trained on hidden size {info['hidden_size']}, "
                            f"{architecture_from} has {hidden}", "name a DAM of the REM's architecture")
        targets: tuple[str, ...] = ()
        if lora is not None:
            _refuse(config_file, "LoRA", {
                "composition_mode": lora.get("composition_mode", "add") != "add" and lora.get("composition_mode"),
                "intermediate_lora": lora.get("intermediate_lora", False), "output_lora": lora.get("output_lora", False),
                "selfattn_lora off": not lora.get("selfattn_lora", True), "use_gating": lora.get("use_gating", False)})
            unknown = [m for m in lora.get("attn_matrices", ["q", "v"]) if m not in _MATRICES]
            _refuse(config_file, "LoRA", {"attn_matrices": unknown})
            targets = tuple(_MATRICES[m] for m in lora.get("attn_matrices", ["q", "v"]))
        bottleneck = 0
        if parallel is not None:
            factor = parallel.get("reduction_factor")
            if isinstance(factor, dict) or not isinstance(factor, (int, float)) or factor <= 0 or hidden % factor:
                raise DataError(config_file, None, f"parallel adapter reduction_factor {factor!r} does not divide "
                                f"hidden size {hidden}", "only a single reduction factor converts")
            bottleneck = int(hidden // factor)
            _refuse(config_file, "parallel adapter", {
                "mh_adapter": parallel.get("mh_adapter", False), "output_adapter off": not parallel.get("output_adapter", True),
                "non_linearity": str(parallel.get("non_linearity", "relu")).lower() != "relu" and parallel.get("non_linearity"),
                "ln_before": parallel.get("ln_before", False), "ln_after": parallel.get("ln_after", False),
                "use_gating": parallel.get("use_gating", False), "phm_layer": parallel.get("phm_layer", False),
                "original_ln_before": parallel.get("original_ln_before", False),
                "original_ln_after off": not parallel.get("original_ln_after", True)})
        rem_config = RemConfig(lora_r=int(lora["r"]) if lora else 0,
                               lora_alpha=float(lora.get("alpha", lora["r"])) if lora else None,
                               lora_targets=targets or ("query", "value"), lora_dropout=float((lora or {}).get("dropout", 0.0)),
                               adapter_bottleneck=bottleneck,
                               adapter_scaling=float((parallel or {}).get("scaling", 4.0)))
        with quiet_transformers():
            backbone = AutoModel.from_config(arch, add_pooling_layer=False)
        rem = attach_rem(backbone, rem_config)
        tensors = read_tensors([found], lambda k: True)
        lora_params = {}
        for name, param in rem.named_lora_parameters():
            m = re.search(r"layer\.(\d+)\.attention\.self\.(query|key|value)\.lora_([AB])\.", name)
            if m:
                lora_params[(int(m.group(1)), m.group(2), m.group(3))] = param
        import torch

        placed, leftover = set(), []
        with torch.no_grad():
            for key, value in tensors.items():
                if m := _LORA_KEY.search(key):
                    slot = (int(m.group(1)), m.group(2), m.group(4))
                    target = lora_params.get(slot)
                elif (m := _ADAPTER_KEY.search(key)) and rem.adapters is not None:
                    layer = int(m.group(1))
                    module = rem.adapters[layer] if layer < len(rem.adapters) else None
                    part = "down" if m.group(3) == "down.0" else "up"
                    target = getattr(getattr(module, part), m.group(4)) if module is not None else None
                    slot = (layer, part, m.group(4))
                else:
                    leftover.append(key)
                    continue
                if target is None or tuple(target.shape) != tuple(value.shape):
                    raise DataError(weights, None, f"{key} {tuple(value.shape)} has no place of that shape in the REM "
                                    f"({rem_config.to_dict()})", "name the DAM architecture the REM was trained on")
                if slot in placed:
                    raise DataError(weights, None, f"two adapters fill {slot} ({key})", "a REM holds one adapter setup")
                target.copy_(value.to(target.dtype))
                placed.add(slot)
        if leftover:
            raise DataError(weights, None, f"{len(leftover)} tensors the REM has no place for (e.g. {leftover[0]})",
                            "only DDR's LoRA + parallel-adapter REMs convert")
        expected = len(lora_params) + (4 * len(rem.adapters) if rem.adapters is not None else 0)
        if len(placed) != expected:
            raise DataError(weights, None, f"the release fills {len(placed)} of the REM's {expected} tensors",
                            "download the release again")
        rem.save(out)
    return Path(out)


def remote_files() -> dict:
    """Each release's archive as a :class:`~zsdr.data.registry.RemoteFile`, keyed by its path under
    ``downloads/`` (the download rule fetches them like the datasets' files)."""
    from zsdr.data.registry import RemoteFile

    files = [RemoteFile(r.url, note="no published checksum (recorded on first download)") for r in RELEASES.values()
             if r.hub_file is None]
    return {f.local_path: f for f in files}


def convert(name: str, source: str | os.PathLike | None, out: str | os.PathLike) -> Path:
    """Convert the release ``name`` of :data:`RELEASES` from its downloaded archive ``source`` into ``out``;
    ``source=None`` reads an archive kept in a hub repository through the Hugging Face cache."""
    if name not in RELEASES:
        raise KeyError(f"unknown release {name!r}; known: {', '.join(sorted(RELEASES))}")
    release = RELEASES[name]
    if source is None:
        from zsdr.models.checkpoints import checkpoint_file, hub_offline

        if release.hub_file is None:
            raise ValueError(f"release {name} is downloaded by the pipeline: pass its archive")
        repo, filename = release.hub_file
        source = checkpoint_file(repo, filename)
        if source is None:
            where = "the Hugging Face cache (the hub is offline)" if hub_offline() else "the Hugging Face hub"
            raise DataError(f"{repo}/{filename}", None, f"not found in {where}",
                            f"download it into the cache (`huggingface-cli download {repo} {filename}`)")
    if release.kind == "ance":
        return convert_ance(source, out, release.needs)
    if release.kind == "condenser":
        return convert_condenser(source, out, release.needs)
    return convert_adapter_rem(source, out, release.needs)

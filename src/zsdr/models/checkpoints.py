"""Where a checkpoint's files are: a local folder or a Hugging Face id, online or offline.

Released checkpoints carry more than ``AutoModel`` reads: ANCE's projection head (``embeddingHead``
+ ``norm`` beside the RoBERTa weights, in ``pytorch_model.bin`` or ``model.safetensors``), the
Condenser head (``model.pt``), a sentence-transformers configuration (``modules.json`` and its
module folders). :func:`checkpoint_file` finds one file of a checkpoint the way ``transformers``
finds its own: a folder's file directly; for a hub id, the Hugging Face cache (``HF_HOME`` /
``HF_HUB_CACHE``; the snapshot that ``refs/main`` names), downloading it unless the hub is offline
(``HF_HUB_OFFLINE=1``). Offline, a file that is not in the cache counts as absent: a cache holds
what was downloaded, so populate it with every file the model needs.

:func:`read_tensors` reads named tensors from a checkpoint's weights (safetensors, sharded or not,
or a PyTorch pickle loaded with ``weights_only=True``) without building the model.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable

import torch

from zsdr.io import DataError

# The weight files transformers writes, in the order it prefers them.
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
_FIX_OFFLINE = ("download the checkpoint into the Hugging Face cache on a machine with access (e.g. "
                "`huggingface-cli download ID`) and copy the cache, or pass a local folder")


def is_local(name: str | os.PathLike) -> bool:
    return Path(name).is_dir()


def hub_offline() -> bool:
    """Whether Hugging Face downloads are switched off (``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE``)."""
    from huggingface_hub import constants

    flag = os.environ.get("TRANSFORMERS_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
    return bool(constants.HF_HUB_OFFLINE) or flag


def checkpoint_file(name: str | os.PathLike, filename: str) -> Path | None:
    """The local path of ``filename`` in checkpoint ``name`` (a folder or a hub id), or ``None`` when the
    checkpoint has no such file (offline: when the cache does not hold it)."""
    folder = Path(name)
    if folder.is_dir():
        path = folder / filename
        return path if path.is_file() else None
    from huggingface_hub import hf_hub_download, try_to_load_from_cache
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError, RepositoryNotFoundError

    repo = str(name)
    try:
        cached = try_to_load_from_cache(repo, filename)
    except ValueError:  # not a valid repo id: neither a folder nor a hub id
        raise DataError(repo, None, "neither a folder nor a Hugging Face id",
                        "pass an existing model folder or an `org/name` id") from None
    if isinstance(cached, str):
        return Path(cached)
    if cached is not None or hub_offline():  # a cached "does not exist", or nothing to ask
        return None
    try:
        return Path(hf_hub_download(repo, filename))
    except EntryNotFoundError:
        return None
    except RepositoryNotFoundError:
        raise DataError(repo, None, "no such model on the Hugging Face hub (or it is private)",
                        "check the id, or pass a local folder") from None
    except LocalEntryNotFoundError:  # the hub could not be reached
        return None


def snapshot_of(name: str | os.PathLike) -> Path | None:
    """The folder holding ``name``'s files: the folder itself, or the cached snapshot of a hub id that
    holds its ``config.json`` (``None`` when it is not cached)."""
    if is_local(name):
        return Path(name)
    config = checkpoint_file(name, "config.json")
    return config.parent if config is not None else None


def weights_location(name: str | os.PathLike) -> list[Path]:
    """The weight files of a checkpoint that transformers would read (shards resolved), first kind found."""
    for filename in WEIGHT_FILES:
        path = checkpoint_file(name, filename)
        if path is None:
            continue
        if filename.endswith(".index.json"):
            index = _read_index(path)
            shards = []
            for shard in sorted(set(index.values())):
                found = checkpoint_file(name, shard)
                if found is None:
                    raise DataError(path, None, f"names shard {shard}, which is missing", _FIX_OFFLINE)
                shards.append(found)
            return shards
        return [path]
    return []


def _read_index(path: Path) -> dict[str, str]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        weight_map = data["weight_map"]
        if not isinstance(weight_map, dict):
            raise TypeError("weight_map is not a mapping")
        return {str(k): str(v) for k, v in weight_map.items()}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DataError(path, None, f"unreadable weight index ({exc})", "download the checkpoint again") from None


def read_tensors(files: list[Path], want: Callable[[str], bool]) -> dict[str, torch.Tensor]:
    """The tensors whose names ``want`` accepts, from the weight files (safetensors or PyTorch pickles)."""
    out: dict[str, torch.Tensor] = {}
    for path in files:
        if path.suffix == ".safetensors":
            from safetensors import safe_open

            try:
                with safe_open(str(path), framework="pt") as f:
                    for key in f.keys():
                        if want(key):
                            out[key] = f.get_tensor(key)
            except Exception as exc:  # safetensors raises its own error types for damaged files
                raise DataError(path, None, f"unreadable safetensors file ({exc})",
                                "download or save the checkpoint again") from None
        else:
            out.update({k: v for k, v in _load_pickle(path).items() if want(k)})
    return out


def _load_pickle(path: Path) -> dict[str, torch.Tensor]:
    """A PyTorch weight pickle as a flat ``{name: tensor}``, read with ``weights_only=True`` (no code runs)."""
    try:
        try:
            state = torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as exc:
            if "mmap" not in str(exc):
                raise
            state = torch.load(str(path), map_location="cpu", weights_only=True)  # the pre-1.6 format
    except Exception as exc:  # a truncated or foreign file: pickle, zip and torch errors alike
        raise DataError(path, None, f"unreadable PyTorch weights ({type(exc).__name__}: {exc})",
                        "download or save the checkpoint again") from None
    if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    if not isinstance(state, dict):
        raise DataError(path, None, f"holds a {type(state).__name__}, not a dictionary of tensors",
                        "save the weights with torch.save(model.state_dict(), path)")
    return {str(k): v for k, v in state.items() if isinstance(v, torch.Tensor)}

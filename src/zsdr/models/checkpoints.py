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

:func:`check_model_folder` checks a model folder before anything loads it (the CLI's ``--model``,
the workflow's model references): ``config.json``, a tokenizer and complete weights, judged from the
files' structure alone (:func:`weights_problem`), so a damaged download is one line naming the file.
:func:`check_model_argument` checks any model argument at once: a folder as above, a name that can
only be a path and does not exist as a missing folder, a hub id not in the local cache while the hub
is offline or cannot be reached (:func:`hub_reachable`) as such, never minutes of download retries.
Once loaded, :func:`check_vocabulary` checks a tokenizer against the model's embeddings.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from zsdr.io import DataError

if TYPE_CHECKING:  # pragma: no cover
    import torch

# The weight files transformers writes, in the order it prefers them.
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
_FIX_OFFLINE = ("download the checkpoint into the Hugging Face cache on a machine with access (e.g. "
                "`huggingface-cli download ID`) and copy the cache, or pass a local folder")
# A tokenizer's vocabulary: the fast tokenizer's file, else a slow tokenizer's (WordPiece, BPE, sentencepiece).
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "spiece.model", "sentencepiece.bpe.model",
                   "tokenizer.model")


def is_local(name: str | os.PathLike) -> bool:
    return Path(name).is_dir()


def looks_like_path(name: str | os.PathLike) -> bool:
    """Whether ``name`` can only mean a local path (never a Hugging Face ``org/name`` id): absolute, starting
    with ``.`` or ``~``, with a backslash, more than one ``/`` or a trailing one, or whose first part is a
    folder here (``models/x`` beside a ``models/`` folder)."""
    text = str(name)
    if Path(text).is_absolute() or text.startswith((".", "~")) or "\\" in text or text.count("/") > 1 \
            or text.endswith("/"):
        return True
    return "/" in text and Path(text.split("/")[0]).is_dir()


@functools.lru_cache(maxsize=1)
def hub_reachable() -> bool:
    """Whether the Hugging Face hub's host answers a TCP connection within 3 s (asked once per process),
    so that a download of a file the cache lacks fails at once rather than after minutes of retries."""
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants

    url = urlparse(constants.ENDPOINT)
    try:
        with socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout=3):
            return True
    except OSError:
        return False


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
    if cached is not None or hub_offline() or not hub_reachable():  # a cached "does not exist", or no one to ask
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
    import torch

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


def check_model_folder(path: str | os.PathLike, argument: str = "model") -> None:
    """A model given as a folder must hold ``config.json`` and complete weights; raise
    :class:`DataError` naming the folder, the problem and the fix otherwise (before any loading)."""
    folder = Path(path)
    if not folder.is_dir():
        return  # a Hugging Face id, or a file: the loader decides
    fix = (f"point {argument} at a folder written by zsdr (save_pretrained + zsdr.json) or a complete "
           "Hugging Face download, or copy the model again")
    if not any(folder.iterdir()):
        raise DataError(folder, None, "the model folder is empty", fix)
    if not (folder / "config.json").is_file() and (folder / "modules.json").is_file():
        return  # a sentence-transformers folder whose transformer lives in a module subfolder
    if not (folder / "config.json").is_file():
        raise DataError(folder, None, "the model folder has no config.json", fix)
    weights = [folder / name for name in WEIGHT_FILES if (folder / name).is_file()]
    if not weights:
        raise DataError(folder, None, "the model folder has no weights (model.safetensors or pytorch_model.bin)", fix)
    for file in weights:
        problem = weights_problem(file)
        if problem:
            raise DataError(file, None, f"the model weights are incomplete or damaged: {problem}", fix)
    problem = tokenizer_problem(folder)
    if problem:
        raise DataError(folder, None, problem, fix)
    from zsdr.io import verify_model_contents

    verify_model_contents(folder)


def weights_problem(file: Path) -> str | None:
    """Why a weights file cannot be complete, from its structure alone (no tensors are read), or None."""
    import struct
    import zipfile

    size = file.stat().st_size
    if file.name.endswith(".index.json"):
        try:
            shards = set(json.loads(file.read_text(encoding="utf-8"))["weight_map"].values())
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            return f"the shard index is not readable ({exc.__class__.__name__})"
        missing = sorted(s for s in shards if not (file.parent / s).is_file())
        if missing:
            return f"shard {missing[0]} is missing"
        for shard in sorted(shards):
            problem = weights_problem(file.parent / shard)
            if problem:
                return f"{shard}: {problem}"
        return None
    if file.suffix == ".safetensors":
        with open(file, "rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                return f"{size} bytes, shorter than a safetensors header"
            (length,) = struct.unpack("<Q", head)
            if length > size - 8:
                return f"the header says {length} bytes, the file has {size - 8} after it"
            try:
                header = json.loads(fh.read(length))
            except ValueError:
                return "the safetensors header is not valid JSON"
        end = max((v["data_offsets"][1] for k, v in header.items()
                   if k != "__metadata__" and isinstance(v, dict) and "data_offsets" in v), default=0)
        if 8 + length + end > size:
            return f"the tensors need {8 + length + end} bytes, the file has {size}"
        return None
    if file.suffix == ".bin" and not zipfile.is_zipfile(file):
        with open(file, "rb") as fh:
            if fh.read(1) == b"\x80":
                return None   # torch's legacy (pre-1.6) pickle format: no structure to check
        return "not a complete PyTorch (zip) archive"
    return None


def tokenizer_problem(folder: str | os.PathLike) -> str | None:
    """Why a model folder holds no usable tokenizer (no vocabulary file: transformers would build one of
    its special tokens alone, and every text would encode alike), or None."""
    folder = Path(folder)
    if any((folder / name).is_file() for name in TOKENIZER_FILES):
        return None
    return (f"the model folder has no tokenizer vocabulary ({', '.join(TOKENIZER_FILES[:3])} or a sentencepiece "
            "model), so every text would encode alike")


def check_vocabulary(name: str | os.PathLike, tokenizer, model) -> None:
    """A tokenizer and a model's input embeddings that belong together: every token id has an embedding
    row, and the tokenizer covers at least half of the rows (a handful of tokens for thousands of rows is
    another model's tokenizer, or its files are missing). DataError naming ``name`` otherwise."""
    rows, tokens = model.get_input_embeddings().num_embeddings, len(tokenizer)
    fix = "put the model's own tokenizer beside its weights (save_pretrained of both into the folder)"
    if tokens > rows:
        raise DataError(name, None, f"its tokenizer has {tokens} tokens, its model {rows} embedding rows: the ids "
                        f"past {rows - 1} have no embedding", fix)
    if tokens < rows / 2:
        raise DataError(name, None, f"its tokenizer has {tokens} tokens for the {rows} embedding rows of its "
                        "model: not that model's tokenizer", fix)


def check_model_argument(name: str | os.PathLike, argument: str = "model") -> None:
    """A model argument that cannot load, at once and in one line (module docstring); a folder is checked
    by :func:`check_model_folder`, a hub id only as far as the cache and the hub's reachability go."""
    text = str(name)
    path = Path(text).expanduser()
    if path.is_dir():
        return check_model_folder(path, argument)
    if path.exists():
        raise DataError(text, None, "is a file, not a model folder", f"point {argument} at a model folder or a "
                        "Hugging Face id")
    if looks_like_path(text):
        raise DataError(text, None, "no such model folder", f"check the path given to {argument}")
    from huggingface_hub import try_to_load_from_cache

    try:
        cached = try_to_load_from_cache(text, "config.json")
    except ValueError:
        raise DataError(text, None, "neither a folder nor a Hugging Face id",
                        f"pass {argument} an existing model folder or an `org/name` id") from None
    if isinstance(cached, str):
        return
    if hub_offline():
        raise DataError(text, None, "no such folder, and not in the Hugging Face cache while the hub is switched "
                        "off (HF_HUB_OFFLINE)", _FIX_OFFLINE)
    if not hub_reachable():
        raise DataError(text, None, "no such folder, and not in the Hugging Face cache while the hub cannot be "
                        "reached", _FIX_OFFLINE)

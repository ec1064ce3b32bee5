"""Masked language modelling on a corpus: DDR's Domain Adaption Module (``adapt/run_adapt_with_mlm.py``).

Each document (``title + " " + text`` of a BEIR ``corpus.jsonl``) is one example. Every time it is
sampled it is tokenised without special tokens, cropped to a random contiguous window of
``max_length - 2`` tokens when longer (a new window each epoch), framed by the model's special
tokens (``[CLS] x [SEP]`` / ``<s> x </s>``, :func:`special_frame`) and masked as Hugging Face's
``DataCollatorForLanguageModeling`` does: each non-special token is selected with probability
``probability`` (15 %); a selected token becomes the mask token with probability 0.8, a random
token of the vocabulary with probability 0.1 and stays as it is otherwise; labels are the original
ids at selected positions and -100 elsewhere. The loss is the cross-entropy over the selected
tokens of the batch.

Crop and masks of a document are drawn from ``(seed, epoch, index)`` alone, so a batch does not
depend on its neighbours, on the number of processes or on a resume.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

IGNORE = -100
# Tokens read per document before cropping, in multiples of max_length (see MlmTask.make_batch).
TOKENIZE_CAP = 8
_MASK_STREAM = 1  # separates the masking generator's seed from the crop RNG's


def random_crop(ids: Sequence[int], length: int, rng: np.random.Generator) -> list[int]:
    """A contiguous window of ``length`` tokens at a random start (``ids`` itself when not longer)."""
    ids = list(ids)
    if len(ids) <= length:
        return ids
    start = int(rng.integers(0, len(ids) - length + 1))
    return ids[start:start + length]


def mask_tokens(input_ids: torch.Tensor, special_mask: torch.Tensor, vocab_size: int, mask_id: int,
                generator: torch.Generator, probability: float = 0.15, mask_fraction: float = 0.8,
                random_fraction: float = 0.1) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's masking, as ``DataCollatorForLanguageModeling.torch_mask_tokens``: ``(inputs, labels)``.

    ``special_mask`` is true where a token must never be selected (special tokens and padding).
    Each other token is selected with ``probability``; of the selected, ``mask_fraction`` become
    ``mask_id``, ``random_fraction`` a uniform token of ``[0, vocab_size)``, the rest stay. Labels
    hold the original id at selected positions and -100 elsewhere. A row may have no selected
    token. The same generator state gives the same output; the inputs are not modified.
    """
    if not 0.0 <= probability <= 1.0:
        raise ValueError(f"mlm probability {probability} must lie in [0, 1]")
    if mask_fraction < 0 or random_fraction < 0 or mask_fraction + random_fraction > 1 + 1e-9:
        raise ValueError(f"mask_fraction {mask_fraction} + random_fraction {random_fraction} must not exceed 1")
    labels = input_ids.clone()
    inputs = input_ids.clone()
    prob = torch.full(labels.shape, float(probability))
    prob.masked_fill_(special_mask.bool().cpu(), 0.0)
    selected = torch.bernoulli(prob, generator=generator).bool().to(labels.device)
    labels[~selected] = IGNORE
    replaced = torch.bernoulli(torch.full(labels.shape, float(mask_fraction)),
                               generator=generator).bool().to(labels.device) & selected
    inputs[replaced] = mask_id
    if mask_fraction >= 1 or random_fraction == 0:
        return inputs, labels
    scaled = min(random_fraction / (1 - mask_fraction), 1.0)
    randomised = (torch.bernoulli(torch.full(labels.shape, scaled), generator=generator).bool().to(labels.device)
                  & selected & ~replaced)
    words = torch.randint(int(vocab_size), labels.shape, dtype=torch.long, generator=generator).to(labels.device)
    inputs[randomised] = words[randomised].to(inputs.dtype)
    return inputs, labels


def pad_masked(rows: Sequence[torch.Tensor], labels: Sequence[torch.Tensor], pad_id: int) -> dict:
    """Masked rows of different lengths as one batch: ``input_ids`` padded with ``pad_id``, ``labels``
    with -100 and the ``attention_mask`` of the real tokens."""
    width = max(len(r) for r in rows)
    out = {"input_ids": torch.full((len(rows), width), int(pad_id), dtype=torch.long),
           "attention_mask": torch.zeros((len(rows), width), dtype=torch.long),
           "labels": torch.full((len(rows), width), IGNORE, dtype=torch.long)}
    for j, (r, lab) in enumerate(zip(rows, labels)):
        out["input_ids"][j, :len(r)] = r
        out["labels"][j, :len(r)] = lab
        out["attention_mask"][j, :len(r)] = 1
    return out


def _mask_seed(seed: int, epoch: int, index: int) -> int:
    return int(np.random.SeedSequence([seed, epoch, index, _MASK_STREAM]).generate_state(1, dtype=np.uint64)[0])


def special_frame(tokenizer) -> tuple[list[int], list[int]]:
    """The ids a tokenizer puts before and after one sequence (``[CLS]``/``[SEP]``, ``<s>``/``</s>``).

    Read off the encoding of a probe text with and without special tokens: Transformers 5's fast
    tokenizers no longer offer ``build_inputs_with_special_tokens``, and this works for any template.
    """
    for probe in ("a", "the", "x y"):
        content = tokenizer(probe, add_special_tokens=False)["input_ids"]
        full = tokenizer(probe, add_special_tokens=True)["input_ids"]
        for k in range(len(full) - len(content) + 1):
            if content and full[k:k + len(content)] == content:
                return list(full[:k]), list(full[k + len(content):])
    raise ValueError("cannot tell where the tokenizer puts its special tokens")


def model_name(model: nn.Module, name: str | None = None) -> str:
    """What errors call a model: ``name``, else its checkpoint path, else its class."""
    return name or getattr(getattr(model, "config", None), "_name_or_path", None) or type(model).__name__


def masked_lm_frame(model: nn.Module, tokenizer, max_length: int, name: str) -> tuple[list[int], list[int], int, int]:
    """``(prefix, suffix, content_length, vocab_size)`` of masked-LM examples of ``max_length`` tokens:
    the special tokens around one sequence, the room left between them and the tokenizer's vocabulary,
    checked against the model (clear errors naming ``name``): the tokenizer must be fast and have a mask
    token."""
    if tokenizer.mask_token is None or tokenizer.mask_token_id is None:
        raise ValueError(f"{name}: the tokenizer has no mask token ([MASK] / <mask>), so the model cannot be "
                         "trained with masked language modelling; start from a masked-LM checkpoint")
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError(f"{name}: masked-LM training needs a fast tokenizer (tokenizer.json; whole-word masking "
                         "reads its word ids)")
    prefix, suffix = special_frame(tokenizer)
    content = int(max_length) - len(prefix) - len(suffix)
    if content < 1:
        raise ValueError(f"max_length {max_length} leaves no room for a token between the special tokens")
    limit = getattr(tokenizer, "model_max_length", None)
    if limit is not None and limit < 1_000_000 and int(max_length) > limit:
        raise ValueError(f"max_length {max_length} exceeds what {name} accepts ({limit} tokens)")
    vocab = len(tokenizer)
    model_vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    if model_vocab is not None and vocab > model_vocab:
        raise ValueError(f"{name}: the tokenizer has {vocab} tokens, the model only {model_vocab}")
    return prefix, suffix, content, vocab


def head_split(model: nn.Module) -> tuple[nn.Module, nn.Module] | None:
    """``(encoder, head)`` of a BERT-/RoBERTa-style masked LM, so that only selected positions reach
    the vocabulary projection; ``None`` for other architectures (the full forward is used)."""
    base = getattr(model, "base_model", None)
    if base is None or base is model:
        return None
    for name in ("cls", "lm_head"):
        head = getattr(model, name, None)
        if isinstance(head, nn.Module):
            return base, head
    return None


class MlmTask(nn.Module):
    """Masked-LM training of ``model`` (an ``AutoModelForMaskedLM``) on ``texts`` for the Trainer."""

    def __init__(self, model: nn.Module, tokenizer, texts: Sequence[str], max_length: int = 512,
                 probability: float = 0.15, seed: int = 42, name: str | None = None):
        super().__init__()
        name = model_name(model, name)
        self.prefix, self.suffix, self.content_length, self.vocab_size = masked_lm_frame(model, tokenizer,
                                                                                        max_length, name)
        if not texts:
            raise ValueError(f"{name}: no documents to train on")
        self.model = model
        self.tokenizer = tokenizer
        self.texts = texts if isinstance(texts, Sequence) else list(texts)
        self.max_length = int(max_length)
        self.probability = float(probability)
        self.seed = int(seed)
        self.special_ids = torch.tensor(sorted(set(tokenizer.all_special_ids)), dtype=torch.long)

    @property
    def num_examples(self) -> int:
        return len(self.texts)

    def make_batch(self, indices: list[int], epoch: int) -> dict:
        tok = self.tokenizer
        # One batched call. Documents are cut at TOKENIZE_CAP x max_length tokens before the crop: the
        # window of a very long document is drawn from its first 8 x max_length tokens (4096 for 512),
        # which bounds the memory of the token lists and the cost of turning them into Python ints.
        pieces = tok([self.texts[i] for i in indices], add_special_tokens=False, truncation=True,
                     max_length=TOKENIZE_CAP * self.max_length, return_attention_mask=False,
                     return_token_type_ids=False)["input_ids"]
        rows_in, rows_lab = [], []
        for i, ids in zip(indices, pieces):
            window = random_crop(ids, self.content_length, np.random.default_rng([self.seed, epoch, i]))
            row = torch.tensor(self.prefix + window + self.suffix, dtype=torch.long)
            special = torch.isin(row, self.special_ids)
            gen = torch.Generator().manual_seed(_mask_seed(self.seed, epoch, i))
            inputs, labels = mask_tokens(row[None], special[None], self.vocab_size, tok.mask_token_id, gen,
                                         probability=self.probability)
            rows_in.append(inputs[0])
            rows_lab.append(labels[0])
        return pad_masked(rows_in, rows_lab, tok.pad_token_id)

    def forward(self, batch: dict) -> tuple[torch.Tensor, dict]:
        labels = batch["labels"]
        selected = labels != IGNORE
        split = head_split(self.model)
        if split is not None:
            base, head = split
            hidden = base(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])[0]
            logits = head(hidden[selected])
        else:
            logits = self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[selected]
        targets = labels[selected]
        if targets.numel() == 0:
            # No token selected in this batch (possible with very short documents): a zero loss whose
            # graph still reaches every parameter (through the empty logits), so backward and DDP's
            # gradient sync run as usual instead of the NaN of a mean over nothing.
            return logits.float().sum() * 0.0, {"accuracy": 0.0, "masked_tokens": 0.0}
        logits = logits.float()
        loss = nn.functional.cross_entropy(logits, targets)
        accuracy = (logits.detach().argmax(dim=-1) == targets).float().mean()
        return loss, {"accuracy": accuracy, "masked_tokens": float(targets.numel())}

    def save(self, directory: str | os.PathLike) -> Path:
        directory = Path(directory)
        self.model.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)
        return directory


@functools.cache
def _not_whitespace() -> str:
    """A regex class of every character Python's ``str.strip()`` keeps: a document is kept when its title or
    text has one, the test ``f"{title} {text}".strip() != ""`` makes, run by Arrow over the mapped column."""
    spaces = (chr(c) for c in range(0x110000) if chr(c).isspace())
    return "[^" + "".join(f"\\x{{{ord(c):x}}}" for c in spaces) + "]"


class CorpusTexts(Sequence):
    """``title + " " + text`` (stripped) of a dataset's corpus in file order, empty documents skipped,
    the first ``max_examples`` of the rest: read from the memory-mapped store
    (:func:`zsdr.data.store.open_current`) when an example is drawn. A process holds the kept rows
    (4 bytes per document: ~35 MB for MS MARCO's 8.8M passages) instead of the texts (~3.4 GB as a list
    of Python strings in every process of a DDP job)."""

    def __init__(self, dataset: str | os.PathLike, max_examples: int | None = None):
        import pyarrow.compute as pc

        from zsdr.data.store import open_current

        self.store = open_current(dataset)[0]
        kept, start = [], 0
        for title, text in zip(self.store.chunks("title"), self.store.chunks("text")):
            mask = pc.or_(pc.match_substring_regex(title, _not_whitespace()),
                          pc.match_substring_regex(text, _not_whitespace()))
            kept.append(np.flatnonzero(mask.to_numpy(zero_copy_only=False)).astype(np.int32) + start)
            start += len(title)
        rows = np.concatenate(kept) if kept else np.zeros(0, np.int32)
        self.rows = rows[:max_examples] if max_examples is not None else rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        doc = self.store[int(self.rows[i])]
        return f"{doc['title']} {doc['text']}".strip()


def corpus_texts(dataset: str | os.PathLike, max_examples: int | None = None) -> CorpusTexts:
    """The training texts of a DAM: :class:`CorpusTexts` of ``dataset``."""
    return CorpusTexts(dataset, max_examples)


def build_mlm_task(spec: dict) -> MlmTask:
    """The masked-LM task of a spec: ``init``, ``dataset``, ``max_length``, ``mlm_probability``
    (0.15), ``max_examples`` (null: every document), ``dropout`` (null keeps the checkpoint's),
    ``tie_embeddings`` (null keeps the checkpoint's; ``false`` gives the output layer its own weights,
    initialised from the input embeddings, see below) and ``train.seed``.

    Untying matters for a backbone trained from scratch on a small corpus (the mini scale): with tied
    weights every step pushes the embedding of every token absent from the batch along the same
    direction (the softmax's negative gradient), so the rare tokens a retriever must tell apart
    collapse together (measured on the mini source: mean cosine between token embeddings 0.00 before,
    0.52 after 400 steps). Untied, the input embeddings only move with the tokens the corpus shows."""
    seed, init, tokenizer, model = masked_lm_of_spec(spec)
    max_examples = spec.get("max_examples")
    texts = corpus_texts(spec["dataset"], None if max_examples is None else int(max_examples))
    return MlmTask(model, tokenizer, texts, max_length=int(spec["max_length"]),
                   probability=float(spec["mlm_probability"]), seed=seed, name=init)


def masked_lm_of_spec(spec: dict) -> tuple[int, str, object, nn.Module]:
    """``(seed, init, tokenizer, model)`` of a masked-LM pretraining spec (``mlm`` or ``coco``): the
    torch seed set from ``train.seed``, the fast tokenizer of ``init`` (which must have a mask token)
    and its masked LM (``tie_embeddings``, :func:`load_masked_lm`; ``dropout``) in training mode."""
    from transformers import AutoTokenizer

    from zsdr.models.loading import set_dropout

    seed = int(spec["train"]["seed"])
    torch.manual_seed(seed)
    init = str(spec["init"])
    tokenizer = AutoTokenizer.from_pretrained(init, use_fast=True)
    if tokenizer.mask_token is None:
        raise ValueError(f"{init}: the tokenizer has no mask token ([MASK] / <mask>), so the model cannot be "
                         "trained with masked language modelling; start from a masked-LM checkpoint")
    model = load_masked_lm(init, spec.get("tie_embeddings"))
    set_dropout(model, spec.get("dropout"))
    model.train()
    return seed, init, tokenizer, model


def load_masked_lm(init: str, tie_embeddings: bool | None = None):
    """``AutoModelForMaskedLM`` of ``init``; ``tie_embeddings`` null keeps the checkpoint's tying, false
    gives the output layer its own weights (initialised from the input embeddings unless the
    checkpoint carries them; see :func:`build_mlm_task` for why)."""
    from transformers import AutoModelForMaskedLM

    if tie_embeddings is None:
        return AutoModelForMaskedLM.from_pretrained(init)
    model = AutoModelForMaskedLM.from_pretrained(init, tie_word_embeddings=bool(tie_embeddings))
    if not tie_embeddings:
        _init_untied_decoder(model, init)
    return model


def _init_untied_decoder(model, init: str) -> None:
    """An untied output layer the checkpoint does not carry starts as a copy of the input embeddings
    (the tied model's output layer), not at random."""
    out, inp = model.get_output_embeddings(), model.get_input_embeddings()
    if out is None or out.weight is inp.weight:
        raise ValueError(f"{init}: cannot untie the output layer of {type(model).__name__}")
    from safetensors import safe_open

    weights = Path(init) / "model.safetensors"
    saved = False
    if weights.is_file():
        with safe_open(str(weights), framework="pt") as f:
            saved = any(k.endswith("decoder.weight") for k in f.keys())
    if not saved:
        with torch.no_grad():
            out.weight.copy_(inp.weight)

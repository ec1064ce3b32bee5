"""Tiny BERT- and RoBERTa-shaped backbones for the mini scale.

No pretrained weights can be downloaded offline, so the mini scale builds its own backbones:
a tokenizer trained on the mini corpora (WordPiece for BERT, byte-level BPE for RoBERTa, as the
real models use) and a randomly initialised masked-LM model of the configured size. Both are
saved with ``save_pretrained`` so every later stage loads them exactly as it would load
``bert-base-uncased`` or ``roberta-base`` (``AutoTokenizer`` / ``AutoModel*.from_pretrained``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable, Iterator

from zsdr.data.formats import iter_records
from zsdr.io import atomic_dir

SPECIAL_BERT = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
SPECIAL_ROBERTA = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]


def corpus_texts(dataset_dirs: Iterable[str | os.PathLike]) -> Iterator[str]:
    """Every title, passage text and query text of the given BEIR folders."""
    for d in dataset_dirs:
        d = Path(d)
        for _, _, obj in iter_records(d / "corpus.jsonl", "corpus"):
            if obj.get("title"):
                yield obj["title"]
            yield obj["text"]
        for _, _, obj in iter_records(d / "queries.jsonl", "queries"):
            yield obj["text"]


def wordpiece_vocab(texts: list[str], vocab_size: int) -> dict[str, int]:
    """A WordPiece vocabulary learnt from ``texts``, the same on every run.

    ``tokenizers``' WordPieceTrainer is not deterministic: it adds the ``##`` continuation alphabet
    in hash-map order, and merge ties then break differently in every process. So the merges are
    learnt by its BPE trainer without a continuation prefix (deterministic: ties break by token id),
    and the vocabulary is laid out from them in merge order: the special tokens, every character
    and its ``##`` form, then each merged piece and its ``##`` form, up to ``vocab_size``.
    WordPiece's greedy longest-match then tokenizes any word of the corpus without ``[UNK]``.
    """
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    bpe = Tokenizer(models.BPE(unk_token="[UNK]"))
    bpe.normalizer = normalizers.BertNormalizer(lowercase=True)
    bpe.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    bpe.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_BERT,
                                                       min_frequency=2))
    learnt = sorted(bpe.get_vocab().items(), key=lambda kv: kv[1])
    pieces = [t for t, _ in learnt if t not in SPECIAL_BERT]
    alphabet = [t for t in pieces if len(t) == 1]
    merged = [t for t in pieces if len(t) > 1]
    vocab: dict[str, int] = {t: i for i, t in enumerate(SPECIAL_BERT)}
    for piece in [*alphabet, *(f"##{c}" for c in alphabet), *(p for t in merged for p in (t, f"##{t}"))]:
        if len(vocab) >= vocab_size:
            break
        vocab.setdefault(piece, len(vocab))
    return vocab


def train_tokenizer(kind: str, texts: list[str], vocab_size: int, max_length: int):
    """A ``PreTrainedTokenizerFast`` of the given family trained on ``texts``."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import BertTokenizerFast, RobertaTokenizerFast

    if kind == "bert":
        tok = Tokenizer(models.WordPiece(wordpiece_vocab(texts, vocab_size), unk_token="[UNK]"))
        tok.normalizer = normalizers.BertNormalizer(lowercase=True)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece()
        cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
        return BertTokenizerFast(tokenizer_object=tok, model_max_length=max_length, do_lower_case=True)
    if kind == "roberta":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_ROBERTA, min_frequency=2,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train_from_iterator(texts, trainer)
        tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")),
                                                          ("<s>", tok.token_to_id("<s>")), trim_offsets=True)
        return RobertaTokenizerFast(tokenizer_object=tok, model_max_length=max_length)
    raise ValueError(f"unknown backbone kind {kind!r} (expected 'bert' or 'roberta')")


def build_model(kind: str, tokenizer, size: dict, seed: int):
    """A randomly initialised ``*ForMaskedLM`` sized by ``size`` (hidden, layers, heads, intermediate, max_length)."""
    import torch
    from transformers import BertConfig, BertForMaskedLM, RobertaConfig, RobertaForMaskedLM

    common = dict(vocab_size=len(tokenizer), hidden_size=size["hidden"], num_hidden_layers=size["layers"],
                  num_attention_heads=size["heads"], intermediate_size=size["intermediate"],
                  hidden_dropout_prob=size.get("dropout", 0.1), attention_probs_dropout_prob=size.get("dropout", 0.1))
    torch.manual_seed(seed)
    if kind == "bert":
        config = BertConfig(max_position_embeddings=size["max_length"], pad_token_id=tokenizer.pad_token_id, **common)
        return BertForMaskedLM(config)
    # RoBERTa offsets positions by padding_idx + 1, hence the two extra positions.
    config = RobertaConfig(max_position_embeddings=size["max_length"] + 2, pad_token_id=tokenizer.pad_token_id,
                           bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                           type_vocab_size=1, **common)
    return RobertaForMaskedLM(config)


def build_tiny_backbone(kind: str, dataset_dirs: list[str | os.PathLike], out: str | os.PathLike, size: dict,
                        vocab_size: int, seed: int) -> dict:
    """Train the tokenizer, build the model and save both to ``out`` (atomically). Returns a summary."""
    texts = list(corpus_texts(dataset_dirs))
    tokenizer = train_tokenizer(kind, texts, vocab_size, size["max_length"])
    model = build_model(kind, tokenizer, size, seed)
    summary = {"kind": kind, "vocab_size": len(tokenizer), "parameters": sum(p.numel() for p in model.parameters()),
               "trained_on": [str(d) for d in dataset_dirs], "texts": len(texts), "seed": seed, **size}
    with atomic_dir(out) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "backbone.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return summary

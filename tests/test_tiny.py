"""zsdr.models.tiny: the mini scale's tokenizers and backbones are the same on every run."""

import json
import subprocess
import sys

import pytest

from zsdr.models.tiny import SPECIAL_BERT, train_tokenizer, wordpiece_vocab

# A seeded corpus of invented words: many pairs with equal counts, where a trainer that breaks
# ties in hash-map order gives a different vocabulary in every process.
CORPUS_SCRIPT = r"""
import hashlib, json, random, sys
from zsdr.models.tiny import train_tokenizer
rnd = random.Random(0)
syll = ["ka", "lo", "mi", "zu", "re", "tan", "vo", "shi", "qua", "ne", "bri", "ox"]
words = ["".join(rnd.choice(syll) for _ in range(rnd.randint(1, 4))) for _ in range(600)]
texts = [" ".join(rnd.choice(words) for _ in range(rnd.randint(5, 30))) + "." for _ in range(1500)]
tok = train_tokenizer(sys.argv[1], texts, 800, 64)
print(hashlib.sha256(json.dumps(tok.backend_tokenizer.to_str(), sort_keys=True).encode()).hexdigest())
"""


@pytest.mark.parametrize("kind", ["bert", "roberta"])
def test_tokenizer_is_the_same_in_every_process(kind):
    digests = {subprocess.run([sys.executable, "-c", CORPUS_SCRIPT, kind], capture_output=True, text=True,
                              check=True).stdout.strip() for _ in range(3)}
    assert len(digests) == 1


def test_wordpiece_vocab_layout_and_coverage():
    texts = ["The kalo zumi ran.", "Zumi kalo tanvo!", "tanvo tanvo kalo zumi ox"] * 5
    vocab = wordpiece_vocab(texts, 60)
    assert list(vocab)[:len(SPECIAL_BERT)] == SPECIAL_BERT
    assert sorted(vocab.values()) == list(range(len(vocab))) and len(vocab) <= 60
    assert "k" in vocab and "##k" in vocab and "kalo" in vocab and "##kalo" in vocab
    tok = train_tokenizer("bert", texts, 60, 32)
    ids = tok("zumi kalo tanvo! the ox")["input_ids"]
    assert tok.unk_token_id not in ids and ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id
    assert tok.decode(ids, skip_special_tokens=True) == "zumi kalo tanvo! the ox"
    assert wordpiece_vocab(texts, 60) == vocab
    assert json.loads(tok.backend_tokenizer.to_str())["model"]["type"] == "WordPiece"


def test_the_tiny_chinese_backbones_tokenizer_splits_per_character(tmp_path):
    """tiny-bert-zh (config `backbones`, language zh): BERT's WordPiece with its Chinese-character split, as
    bert-base-chinese tokenizes: every Han character and full-width mark one token, none unknown."""
    from zsdr.data.formats import read_corpus
    from zsdr.data.mini import generate
    from zsdr.models.tiny import corpus_texts

    cfg = {"seed": 29, "topics": 4, "topic_words": 8, "attributes": 8, "values": 20, "docs_per_entity": 4,
           "sentences": [4, 6], "distractors": 1, "synonym_rate": 0.7, "negatives": 5, "triples_per_query": 1,
           "domains": [{"name": "mini-zh-alpha", "role": "target", "docs": 120, "test_queries": 20}]}
    generate(cfg, tmp_path, language="zh")
    texts = list(corpus_texts([tmp_path / "mini-zh-alpha"]))
    tok = train_tokenizer("bert", texts, 4000, 128)
    text = read_corpus(tmp_path / "mini-zh-alpha")["zh-alpha-d0"]["text"]
    assert tok.tokenize(text) == list(text) and "，" in text and text.endswith("。")
    ids = tok(texts[5])["input_ids"]
    assert tok.unk_token_id not in ids and len(ids) == len(texts[5]) + 2
    assert tok.decode(ids, skip_special_tokens=True).replace(" ", "") == texts[5]

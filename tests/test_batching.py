"""The one batching loop (zsdr.batching): length-sorted batches with the input order restored, and the pinned
copy to a device. Each of its users gives, byte for byte, what the loop it replaced gave: the same batches (the
same rows, in the same order within a batch), padded to the same length, in the same dtype. The references here
are those loops as they were written before the helper (a sort, a cut and a restore each), run on tiny models."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.conftest import mini_with_backbones
from zsdr.batching import length_batches, length_order, map_by_length, to_device

MINI = {
    "seed": 3, "topics": 2, "topic_words": 6, "attributes": 6, "values": 12, "docs_per_entity": 3,
    "sentences": [1, 6], "distractors": 1, "synonym_rate": 0.5, "negatives": 6, "triples_per_query": 1,
    "domains": [{"name": "src", "role": "source", "docs": 48, "train_queries": 10, "dev_queries": 4}],
}
SIZE = {"hidden": 32, "layers": 1, "heads": 2, "intermediate": 64, "max_length": 128, "dropout": 0.0}
SRC = Path(__file__).resolve().parents[1] / "src" / "zsdr"


@pytest.fixture(scope="module")
def mini(tmp_path_factory):
    return mini_with_backbones(tmp_path_factory.mktemp("batching"), MINI, SIZE, kinds=("bert",))


def _texts(mini: Path) -> list[dict]:
    from zsdr.data.formats import read_corpus

    return list(read_corpus(mini / "data" / "src").values())


# ----------------------------------------------------------------------- the cuts the loops made before
def _old_budget_bounds(sorted_lengths: np.ndarray, max_tokens: int) -> list[tuple[int, int]]:
    """The encoder's cut (longest first): as many texts as the first one's width allows."""
    out, start, n = [], 0, len(sorted_lengths)
    while start < n:
        width = max(int(sorted_lengths[start]), 1)
        stop = min(n, start + max(max_tokens // width, 1))
        out.append((start, stop))
        start = stop
    return out


def _old_chunks(lengths: torch.Tensor, max_tokens: int) -> list[torch.Tensor] | None:
    """The CPU forward's chunks (shortest first): rows while rows x the newest row fits."""
    n = len(lengths)
    if n == 0 or n * int(lengths.max()) <= int(max_tokens):
        return None
    order = torch.sort(lengths, stable=True).indices
    chunks, start = [], 0
    for stop in range(1, n + 1):
        if stop == n or (stop + 1 - start) * int(lengths[order[stop]]) > max_tokens:
            chunks.append(order[start:stop])
            start = stop
    return chunks


def test_length_batches_cut_as_the_loops_they_replace():
    rng = np.random.default_rng(0)
    for _ in range(300):
        lengths = rng.integers(1, 60, size=int(rng.integers(0, 40)))
        budget, size = int(rng.integers(1, 400)), int(rng.integers(1, 9))
        down, up = np.argsort(-lengths, kind="stable"), np.argsort(lengths, kind="stable")
        assert np.array_equal(length_order(lengths), down) and np.array_equal(length_order(torch.from_numpy(
            lengths), longest_first=False), up)
        old = [down[s:e].tolist() for s, e in _old_budget_bounds(lengths[down], budget)]
        assert [b.tolist() for b in length_batches(lengths, max_tokens=budget)] == old
        assert [b.tolist() for b in length_batches(lengths, size=size)] == \
            [down[s:s + size].tolist() for s in range(0, len(lengths), size)]   # the reader's, teacher's, QGen's
        chunks = _old_chunks(torch.from_numpy(lengths), budget)
        got = [b.tolist() for b in length_batches(lengths, max_tokens=budget, longest_first=False)]
        assert got == ([up.tolist()] if len(lengths) else []) if chunks is None else [c.tolist() for c in chunks]
    # the examples: longest first within 20 tokens; shortest first within 12 (ties in input order); alone if over
    assert [b.tolist() for b in length_batches([10, 10, 8, 5, 5, 5, 2, 2, 2, 2, 1], max_tokens=20)] == \
        [[0, 1], [2, 3], [4, 5, 6, 7], [8, 9, 10]]
    assert [b.tolist() for b in length_batches([5, 3, 9, 3, 7], max_tokens=12, longest_first=False)] == \
        [[1, 3], [0], [4], [2]]
    assert [b.tolist() for b in length_batches([50, 40], max_tokens=20)] == [[0], [1]]
    assert [b.tolist() for b in length_batches([3, 3, 3, 1], size=2, max_tokens=100)] == [[0, 1], [2, 3]]
    with pytest.raises(ValueError, match="size .* or max_tokens"):
        length_batches([1, 2])
    with pytest.raises(ValueError, match="batch size 0"):
        length_batches([1, 2], size=0)


def test_results_come_back_in_input_order_with_their_gradients():
    lengths = [4, 9, 1, 9, 6, 2, 7]
    seen = []

    def rows_back(b, rows):
        seen.append((b, rows.tolist()))
        return [f"row {i}" for i in rows]

    assert map_by_length(rows_back, lengths, size=3) == [f"row {i}" for i in range(7)]
    assert seen == [(0, [1, 3, 6]), (1, [4, 0, 5]), (2, [2])]
    assert map_by_length(rows_back, [], size=3) == [] and map_by_length(lambda b, r: None, lengths, size=2) is None
    # tensors (and tuples of them) with autograd: the gradients of a cat-and-unsort, exactly
    x = torch.randn(7, 5, dtype=torch.float64, requires_grad=True)
    weights = torch.randn(7, 5, dtype=torch.float64)

    def forward(b, rows):
        part = x[torch.from_numpy(rows)]
        return part.sin() * (b + 1), part.cumsum(1).to(torch.float32)

    one, two = map_by_length(forward, lengths, max_tokens=14, longest_first=False)
    assert one.dtype == torch.float64 and two.dtype == torch.float32
    ((one * weights).sum() + two.square().sum()).backward()
    grad, x.grad = x.grad.clone(), None
    batches = length_batches(lengths, max_tokens=14, longest_first=False)
    parts = [forward(b, rows) for b, rows in enumerate(batches)]
    inverse = torch.from_numpy(np.argsort(np.concatenate(batches), kind="stable"))
    ref_one, ref_two = (torch.cat([p[i] for p in parts])[inverse] for i in (0, 1))
    ((ref_one * weights).sum() + ref_two.square().sum()).backward()
    assert torch.equal(one, ref_one) and torch.equal(two, ref_two) and torch.equal(grad, x.grad)


def test_the_copy_to_a_device_keeps_every_value_and_what_is_not_a_tensor():
    t = torch.arange(6).view(2, 3)
    batch = {"ids": t, "pair": (t, t.float()), "names": ["a"], "n": 3}
    moved = to_device(batch, "cpu")
    assert torch.equal(moved["ids"], t) and moved["names"] == ["a"] and moved["n"] == 3
    assert isinstance(moved["pair"], tuple) and moved["pair"][1].dtype == torch.float32
    if torch.cuda.is_available():
        on = to_device(batch, "cuda")
        assert on["ids"].is_cuda and torch.equal(on["ids"].cpu(), t)


def test_the_pinned_copy_and_the_length_sort_are_written_once():
    """No module but zsdr.batching pins a batch or copies without waiting, or cuts texts sorted by length."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path.name == "batching.py" and path.parent == SRC:
            continue
        text = path.read_text(encoding="utf-8")
        for needle in (".pin_memory()", "non_blocking=", "argsort(-lengths", "argsort(-packed.lengths",
                       "key=lambda i: -lengths", "torch.sort(lengths"):
            if needle in text:
                found.append(f"{path.relative_to(SRC)}: {needle}")
    assert not found, "a second copy of the batching loop or the pinned copy (use zsdr.batching):\n" + "\n".join(found)


# -------------------------------------------------------------------- each user against its old loop
def test_the_encoders_batches_padding_and_vectors_are_the_old_loops(mini):
    from zsdr.models.encoder import Encoder

    enc = Encoder.from_pretrained(mini / "bert", pooling="cls", similarity="dot").eval()
    features = enc.tokenize_docs(_texts(mini))
    packed = enc.pack(features)
    n = len(packed)
    calls: list[tuple] = []
    hook = enc.backbone.register_forward_hook(
        lambda m, args, kw, out: calls.append((tuple(kw["input_ids"].shape), kw["input_ids"].dtype)),
        with_kwargs=True)
    try:
        for batch_size, max_tokens in ((4, None), (3, 300)):
            calls.clear()
            got = enc.encode_tokenized(features, batch_size, device="cpu", max_tokens=max_tokens)
            new_calls = list(calls)
            calls.clear()
            budget = max_tokens or batch_size * max(int(packed.lengths.max()), 1)
            order = np.argsort(-packed.lengths, kind="stable")
            ref = np.empty((n, enc.dim), dtype=np.float32)
            with torch.inference_mode():
                for s, e in _old_budget_bounds(packed.lengths[order], budget):
                    batch = {k: torch.from_numpy(v) for k, v in packed.pad(order[s:e], enc.pad_id).items()}
                    ref[order[s:e]] = enc._embed(enc.backbone, enc.head, batch).float().numpy()
            assert new_calls == calls and len(calls) > 3           # the same batches, padded to the same width
            assert got.dtype == np.float32 and np.array_equal(got, ref)
    finally:
        hook.remove()


def test_a_forward_in_chunks_gives_the_old_chunks_outputs_and_gradients_exactly(mini):
    from zsdr.models.encoder import Encoder
    from zsdr.models.inference import run_in_length_chunks

    enc = Encoder.from_pretrained(mini / "bert", pooling="mean", similarity="cosine").eval()
    batch = enc.collate(enc.tokenize_docs(_texts(mini)[:20]))

    def old(fn, features, max_tokens, token_outputs=()):
        mask = features["attention_mask"]
        lengths = mask.sum(dim=1)
        chunks = _old_chunks(lengths, int(max_tokens))
        width, parts = mask.shape[1], []
        for rows in chunks:
            cut = max(int(lengths[rows].max()), 1)
            parts.append(fn(**{k: v[rows, :cut] for k, v in features.items()}))
        inverse = torch.empty(len(mask), dtype=torch.long)
        inverse[torch.cat(chunks)] = torch.arange(len(mask))
        joined = []
        for i in range(len(parts[0])):
            pieces = [p[i] for p in parts]
            if i in token_outputs:
                pieces = [torch.nn.functional.pad(t, (0, 0) * (t.dim() - 2) + (0, width - t.shape[1])) for t in pieces]
            joined.append(torch.cat(pieces)[inverse])
        return tuple(joined)

    def run(chunked):
        enc.zero_grad()
        pooled, hidden = chunked(partial(enc._forward, return_hidden=True), dict(batch), 200, token_outputs=(1,))
        (pooled.square().sum() + hidden.sum()).backward()
        return pooled.detach(), hidden.detach(), {k: p.grad.clone() for k, p in enc.named_parameters()
                                                  if p.grad is not None}

    new, ref = run(run_in_length_chunks), run(old)
    assert _old_chunks(batch["attention_mask"].sum(1), 200) is not None   # several chunks
    assert torch.equal(new[0], ref[0]) and torch.equal(new[1], ref[1])
    assert new[2].keys() == ref[2].keys() and all(torch.equal(new[2][k], ref[2][k]) for k in ref[2])


def test_the_readers_sorted_batches_give_the_old_loops_probabilities(mini):
    from zsdr.models.reader import PASSAGE, Reader

    torch.manual_seed(0)
    reader = Reader.from_pretrained(mini / "bert", max_length=48).eval()
    texts = [d["text"] for d in _texts(mini)[:13]]
    questions = [t.split()[0] + " " + t.split()[-1] for t in texts]
    with torch.no_grad():
        got = reader._start_probabilities_sorted(questions, texts, 4, torch.device("cpu"), False)
        enc = reader.tokenizer(questions, texts, truncation="only_second", max_length=reader.max_length,
                               padding=False, return_offsets_mapping=True)
        names = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in enc]
        pad = {"input_ids": reader.tokenizer.pad_token_id or 0, "attention_mask": 0, "token_type_ids": 0}
        lengths = np.array([len(r) for r in enc["input_ids"]])
        order = np.argsort(-lengths, kind="stable")
        ref = [None] * len(texts)
        for start in range(0, len(texts), 4):
            rows = order[start:start + 4]
            width = int(lengths[rows[0]])
            arrays = {k: np.full((len(rows), width), pad[k], dtype=np.int64) for k in names}
            passage = np.zeros((len(rows), width), dtype=bool)
            for j, i in enumerate(rows):
                for k in names:
                    arrays[k][j, :lengths[i]] = enc[k][i]
                passage[j, :lengths[i]] = [s == PASSAGE for s in enc.sequence_ids(int(i))]
            logits = reader.model(**{k: torch.from_numpy(v) for k, v in arrays.items()}).start_logits.float()
            probs = torch.softmax(logits.masked_fill(~torch.from_numpy(passage), float("-inf")), dim=1)
            probs = probs.nan_to_num_(0.0).numpy()
            for j, i in enumerate(rows):
                off = enc["offset_mapping"][i]
                ref[i] = [(off[c][0], off[c][1], float(probs[j, c])) for c in np.flatnonzero(passage[j])]
    assert len(set(lengths.tolist())) > 3 and got == ref


def test_the_teachers_sorted_windows_give_the_old_loops_file(mini, tmp_path, monkeypatch):
    from zsdr.data.store import ById, open_current
    from zsdr.data.training_set import iter_negatives, write_teacher_scores
    from zsdr.models.cross_encoder import CrossEncoder
    from zsdr.training import teacher
    from zsdr.training.tasks import passage_text

    src = mini / "data" / "src"
    monkeypatch.setattr(teacher, "SORT_WINDOW", 2)                     # several windows of 2 batches
    torch.manual_seed(0)                                               # the cross-encoder's head
    n = teacher.score_pairs(mini / "bert", src, src / "negatives.jsonl", tmp_path / "new.jsonl", batch_size=3,
                            max_candidates=3, device="cpu")
    torch.manual_seed(0)
    model = CrossEncoder.from_pretrained(mini / "bert").eval()
    docs, qs = open_current(src)
    corpus, queries = ById(docs), ById(qs)
    pairs = [(ex.qid, d) for ex in iter_negatives(src / "negatives.jsonl")
             for d in dict.fromkeys((*ex.positives, *ex.negatives[:3])) if d in corpus]
    scores: dict = {}
    for q, d in pairs:
        scores.setdefault(q, {})[d] = float("nan")
    with torch.inference_mode():
        for w in range(0, len(pairs), 6):
            texts = [(q, d, queries[q], passage_text(corpus[d])) for q, d in pairs[w:w + 6]]
            texts.sort(key=lambda t: len(t[2]) + len(t[3]), reverse=True)
            for start in range(0, len(texts), 3):
                chunk = texts[start:start + 3]
                logits = model(**model.features([t[2] for t in chunk], [t[3] for t in chunk])).float().tolist()
                for (q, d, _, _), s in zip(chunk, logits):
                    scores[q][d] = s
    write_teacher_scores(tmp_path / "ref.jsonl", scores)
    assert n == len(pairs) > 12
    assert (tmp_path / "new.jsonl").read_bytes() == (tmp_path / "ref.jsonl").read_bytes()
    assert all(json.loads(line)["scores"] for line in (tmp_path / "new.jsonl").read_text().splitlines())


def test_qgens_sorted_pools_give_the_old_loops_queries(mini, tmp_path):
    from zsdr.models.generator import QueryGenerator, build_tiny_generator, passage_of
    from zsdr.training.weak.qgen_pairs import generate_sorted

    build_tiny_generator(mini / "bert", tmp_path / "gen", {"hidden": 32, "intermediate": 64, "layers": 1,
                                                            "heads": 2}, seed=0)
    gen = QueryGenerator.from_pretrained(tmp_path / "gen").for_inference("cpu", "fp32")
    passages = [passage_of(d) for d in _texts(mini)[:9]]
    sampling = dict(top_k=25, top_p=0.95, max_length=8)
    got = generate_sorted(gen, passages, 2, 1, 7, 4, **sampling)
    lengths = [len(ids) for ids in gen.tokenizer(passages, max_length=gen.max_length, truncation=True,
                                                 return_token_type_ids=False, return_attention_mask=False)["input_ids"]]
    order = sorted(range(len(passages)), key=lambda i: -lengths[i])
    ref: list = [[] for _ in passages]
    for b, start in enumerate(range(0, len(order), 4)):
        rows = order[start:start + 4]
        for i, queries in zip(rows, gen.generate([passages[i] for i in rows], 2, batch_size=4, seed=[7, 1, b],
                                                 **sampling)):
            ref[i] = queries
    assert got == ref and any(got)

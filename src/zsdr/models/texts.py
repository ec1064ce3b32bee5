"""Tokenisation: how queries and documents become token ids under an encoder's settings.

:class:`TextTokenizer` applies an :class:`~zsdr.models.settings.EncoderConfig` to a Hugging Face
tokenizer: prefixes, maximum lengths, the document format, TCT-ColBERT's query filling and RMSC's
soft tokens (:mod:`zsdr.models.soft_tokens`: domain tokens right after the head special tokens,
relevance tokens right before the final one, ``[CLS] [T] x [H] [SEP]``; ``contexts`` pick them per
text, default the inference context).

Document formats (``doc_format``):

* ``title_space_text``: ``(title + " " + text).strip()``, the BEIR / MTEB sentence-transformers
  convention;
* ``title_sep_text``: title and text as a tokenizer pair (``[CLS] title [SEP] text [SEP]``);
* ``lower_title_text``: the lower-cased title's tokens directly followed by the text's tokens, no
  separator (COCO-DR);
* ``text``: the text alone.
"""

from __future__ import annotations

from typing import Sequence

from zsdr.models.settings import EncoderConfig
from zsdr.models.soft_tokens import SoftTokens


class TextTokenizer:
    """Token ids (and token types) of queries and documents: ``tokenizer`` under ``config``;
    ``soft_ids``: each soft token string's id (:func:`soft_token_ids`) when ``config`` has soft tokens."""

    def __init__(self, tokenizer, config: EncoderConfig, soft_ids: dict[str, int] | None = None):
        self.tokenizer = tokenizer
        self.config = config
        self.soft: SoftTokens | None = config.soft
        if (self.soft is None) != (soft_ids is None):
            raise ValueError("soft token ids go with soft tokens in the settings, and only with them")
        self.soft_ids = soft_ids
        self._special: tuple[list[int], list[int]] | None = None

    def context_ids(self, contexts, n: int) -> list[tuple[list[int], list[int]]] | None:
        """Per text, the ids of its domain and relevance tokens (``None`` for an encoder without soft tokens).

        ``contexts``: ``None`` (the inference context for all), one ``(domain, relevance)`` pair for all,
        or a list with one pair per text.
        """
        if self.soft is None:
            if contexts is not None:
                raise ValueError("contexts need soft tokens, and this encoder has none (add them with "
                                 "Encoder.add_soft_tokens); pass contexts=None")
            return None
        soft, ids = self.soft, self.soft_ids
        if contexts is None:
            contexts = [soft.inference] * n
        elif is_context(contexts):
            contexts = [contexts] * n
        else:
            contexts = list(contexts)
            if len(contexts) != n:
                raise ValueError(f"{len(contexts)} contexts for {n} texts (give one (domain, relevance) pair per "
                                 "text, a single pair, or None)")
        cache: dict[tuple[str, str], tuple[list[int], list[int]]] = {}
        out = []
        for c in contexts:
            if not is_context(c):
                raise ValueError(f"a context is a (domain, relevance) pair, got {c!r}")
            key = (c[0], c[1])
            if key not in cache:
                domain, relevance = soft.tokens(*key)
                cache[key] = ([ids[t] for t in domain], [ids[t] for t in relevance])
            out.append(cache[key])
        return out

    def insert_soft(self, out: dict[str, list], soft: list[tuple[list[int], list[int]]]) -> dict[str, list]:
        """Put each row's domain ids right after the head special tokens and its relevance ids right before
        the tail ones. Inserted tokens take the token type of their neighbour inside (the token after the
        domain tokens, the one before the relevance tokens), offset ``(0, 0)`` and sequence id ``None``.
        A pair (``title_sep_text``) starts and ends with the specials of a single sequence (BERT
        ``[CLS] a [SEP] b [SEP]``, RoBERTa ``<s> a </s></s> b </s>``), so the same positions apply."""
        n_head, n_tail = (len(s) for s in self.specials())
        for i, (dom, rel) in enumerate(soft):
            length = len(out["input_ids"][i])
            a, b = n_head, length - n_tail
            out["input_ids"][i] = _splice(out["input_ids"][i], a, b, dom, rel)
            if "token_type_ids" in out:
                t = out["token_type_ids"][i]
                after = t[a] if a < length else (t[a - 1] if a else 0)
                before = t[b - 1] if b > 0 else (t[b] if b < length else 0)
                out["token_type_ids"][i] = _splice(t, a, b, [after] * len(dom), [before] * len(rel))
            if "offset_mapping" in out:
                out["offset_mapping"][i] = _splice(out["offset_mapping"][i], a, b, [(0, 0)] * len(dom),
                                                   [(0, 0)] * len(rel))
                out["sequence_ids"][i] = _splice(out["sequence_ids"][i], a, b, [None] * len(dom), [None] * len(rel))
        return out

    def uses_token_types(self) -> bool:
        return "token_type_ids" in getattr(self.tokenizer, "model_input_names", ())

    def specials(self) -> tuple[list[int], list[int]]:
        """The special ids a single sequence gets before and after its tokens (e.g. [CLS] / [SEP])."""
        if self._special is None:
            probe = "a"
            bare = self.tokenizer(probe, add_special_tokens=False)["input_ids"]
            full = self.tokenizer(probe, add_special_tokens=True)["input_ids"]
            for i in range(len(full) - len(bare) + 1):
                if full[i:i + len(bare)] == bare:
                    self._special = (full[:i], full[i + len(bare):])
                    break
            else:  # pragma: no cover - every tokenizer we know embeds the bare ids
                raise RuntimeError(f"cannot locate the special tokens of {type(self.tokenizer).__name__}")
        return self._special

    def tokenize(self, first: list[str], second: list[str] | None, max_length: int, offsets: bool = False,
                  soft: list[tuple[list[int], list[int]]] | None = None,
                  setting: str = "doc_max_length") -> dict[str, list[list[int]]]:
        """Token ids (and token types); with ``offsets`` also each token's ``offset_mapping`` (character span
        in its own string) and ``sequence_ids`` (0 first string, 1 second, None special).

        ``soft`` (from :meth:`context_ids`): each row's domain and relevance ids, placed around the text
        within ``max_length`` (the text is truncated to leave them room; ``setting`` names the length
        in errors).
        """
        if not first:
            out = {"input_ids": [], **({"token_type_ids": []} if self.uses_token_types() else {})}
            return {**out, "offset_mapping": [], "sequence_ids": []} if offsets else out
        if soft is not None:
            max_length = self.soft_budget(max_length, setting, pair=second is not None)
        enc = self.tokenizer(first, second, add_special_tokens=self.config.special_tokens, truncation=True,
                             max_length=max_length,
                             padding=False, return_attention_mask=False,
                             return_token_type_ids=self.uses_token_types(), return_offsets_mapping=offsets)
        out = {"input_ids": enc["input_ids"]}
        if self.uses_token_types():
            out["token_type_ids"] = enc["token_type_ids"]
        if offsets:
            out["offset_mapping"] = enc["offset_mapping"]
            out["sequence_ids"] = [enc.sequence_ids(i) for i in range(len(first))]
        return out if soft is None else self.insert_soft(out, soft)

    def soft_budget(self, max_length: int, setting: str, pair: bool = False) -> int:
        """``max_length`` less the ``2k`` soft tokens, or ValueError when no text token would fit."""
        reserved = 2 * self.soft.k
        specials = self.tokenizer.num_special_tokens_to_add(pair=pair)
        if max_length - reserved < specials + 1:
            raise ValueError(f"{setting} {max_length} leaves no room for text beside {reserved} soft tokens and "
                             f"{specials} special tokens (set it to at least {reserved + specials + 1})")
        return max_length - reserved

    def tokenize_queries(self, texts: Sequence[str], contexts=None,
                         max_length: int | None = None) -> dict[str, list[list[int]]]:
        """Token ids (and token types) of queries. ``contexts`` (encoders with soft tokens only): ``None``
        for the inference context, one ``(domain, relevance)`` pair for all, or one pair per text.
        ``max_length``: another length than ``query_max_length``."""
        texts = list(texts)
        soft = self.context_ids(contexts, len(texts))
        p = self.config.query_prefix
        length = self.config.query_max_length if max_length is None else int(max_length)
        out = self.tokenize([p + t for t in texts], None, length, soft=soft, setting="query_max_length")
        return self.fill_queries(out) if self.config.query_fill else out

    def fill_queries(self, out: dict[str, list[list[int]]]) -> dict[str, list[list[int]]]:
        """Every query row filled up to ``query_max_length`` with the attended ``query_fill`` token."""
        token = self.config.query_fill
        fill = self.tokenizer.convert_tokens_to_ids(token)
        if not isinstance(fill, int) or (fill == self.tokenizer.unk_token_id and token != self.tokenizer.unk_token):
            raise ValueError(f"query_fill {token!r} is not a token of this tokenizer")
        n = self.config.query_max_length
        out["input_ids"] = [row + [fill] * (n - len(row)) for row in out["input_ids"]]
        if "token_type_ids" in out:
            out["token_type_ids"] = [row + [row[-1] if row else 0] * (n - len(row)) for row in out["token_type_ids"]]
        return out

    def tokenize_docs(self, docs: Sequence[dict | str], offsets: bool = False,
                      contexts=None) -> dict[str, list[list[int]]]:
        """Token ids of documents in the ``doc_format``; ``offsets`` adds the character span of every token in
        the string it came from and its sequence id (:meth:`tokenize`), for the formats that tokenise
        strings (not ``lower_title_text``, which joins title and text at the token level). ``contexts`` as
        in :meth:`tokenize_queries`; soft tokens have offset ``(0, 0)`` and sequence id ``None``."""
        cfg = self.config
        if offsets and cfg.doc_format == "lower_title_text":
            raise ValueError("doc_format lower_title_text joins title and text at the token level and has no "
                             "character offsets: use title_space_text, title_sep_text or text")
        docs = list(docs)
        soft = self.context_ids(contexts, len(docs))
        if not docs:
            return self.tokenize([], None, cfg.doc_max_length, offsets)
        titles = [("" if isinstance(d, str) else d.get("title") or "") for d in docs]
        texts = [(d if isinstance(d, str) else d.get("text") or "") for d in docs]
        p = cfg.doc_prefix
        if cfg.doc_format == "title_space_text":
            return self.tokenize([p + f"{t} {x}".strip() for t, x in zip(titles, texts)], None, cfg.doc_max_length,
                                  offsets, soft)
        if cfg.doc_format == "text":
            return self.tokenize([p + x for x in texts], None, cfg.doc_max_length, offsets, soft)
        if cfg.doc_format == "title_sep_text":
            return self.tokenize([p + t for t in titles], texts, cfg.doc_max_length, offsets, soft)
        # lower_title_text: title tokens (lower-cased) then text tokens, one segment, no separator.
        head, tail = self.specials() if cfg.special_tokens else ([], [])
        max_length = cfg.doc_max_length if soft is None else self.soft_budget(cfg.doc_max_length, "doc_max_length")
        budget = max(max_length - len(head) - len(tail), 0)
        bare = dict(add_special_tokens=False, truncation=True, max_length=max(budget, 1))
        t_ids = self.tokenizer([p + t.lower() for t in titles], **bare)["input_ids"]
        x_ids = self.tokenizer(texts, **bare)["input_ids"]
        ids = [head + (a + b)[:budget] + tail for a, b in zip(t_ids, x_ids)]
        out = {"input_ids": ids}
        if self.uses_token_types():
            out["token_type_ids"] = [[0] * len(i) for i in ids]
        return out if soft is None else self.insert_soft(out, soft)


def is_context(value) -> bool:
    """Whether ``value`` is one ``(domain, relevance)`` pair (rather than a list of them)."""
    return isinstance(value, (tuple, list)) and len(value) == 2 and all(isinstance(v, str) for v in value)


def _splice(row: list, start: int, end: int, left: list, right: list) -> list:
    """``row`` with ``left`` inserted before position ``start`` and ``right`` before position ``end``."""
    return list(row[:start]) + left + list(row[start:end]) + right + list(row[end:])


def soft_token_ids(tokenizer, rows: int, soft: SoftTokens) -> dict[str, int]:
    """Each soft token string's id; ValueError unless every one is a distinct, known id with an embedding row."""
    strings = soft.all_tokens()
    ids = tokenizer.convert_tokens_to_ids(strings)
    unk = tokenizer.unk_token_id
    bad = [t for t, i in zip(strings, ids) if not isinstance(i, int) or i == unk or not 0 <= i < rows]
    if bad:
        raise ValueError(f"soft tokens {bad} are not in the tokenizer's vocabulary or have no embedding row "
                         f"({rows} rows)")
    if len(set(ids)) != len(ids):
        raise ValueError(f"soft tokens {strings} do not map to distinct ids ({ids})")
    return dict(zip(strings, ids))

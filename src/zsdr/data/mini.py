"""The mini benchmark: a deterministic synthetic multi-domain retrieval benchmark.

It stands in for "train on MS MARCO, test on unseen BEIR domains" on a laptop. One *source*
domain (training queries with positives and BM25 hard negatives, dev queries) and any number of
*target* domains (corpus, test queries, graded qrels). Every domain has its own invented
vocabulary (its own syllable inventory), so targets are lexically shifted from the source;
English function words and a small pool of general words are shared.

What a retriever has to learn
  A passage states one fact, "the <attribute> of <Entity> is <value>", among background
  sentences and a distractor fact about another entity of the same topic. A query asks for the
  attribute of an entity. Every attribute concept has two surface forms (synonyms); the query
  and its relevant passage use different forms with probability ``synonym_rate``. Other passages
  about the same entity (grade 1 in target qrels) and passages stating the same attribute of
  another entity are the lexical traps: BM25 cannot tell them from the answer when the forms
  differ.

What only the target corpus can teach
  The target synonym pairs never occur in the source corpus or source queries. Inside a target
  corpus both forms occur in the same contexts (same entity, same value), so a method that
  learns from the target corpus (MLM, contrastive pretraining, adversarial alignment) can learn
  that they mean the same; a model that only saw source data cannot.

BERM's essential unit
  For every (query, positive) pair ``units.jsonl`` records the passage's sentences, the index of
  the sentence that answers the query and the answer's character span (the value word), so unit
  labelling and the extractive reader can be checked against the truth.

Files per domain (BEIR layout, :mod:`zsdr.data.formats`), under ``<root>/<domain name>/``:
``corpus.jsonl``, ``queries.jsonl``, ``qrels/{train,dev}.tsv`` (source) or ``qrels/test.tsv``
(targets), ``units.jsonl``; the source also has ``negatives.jsonl`` (BM25 negatives in the shape of
sentence-transformers' msmarco-hard-negatives) and ``triples.train.tsv`` (MS MARCO text triples).
``<root>/mini.json`` describes the generated domains (sizes, seed, synonym pairs).

Chinese domains
  A domain with ``language: zh`` is written in Chinese (:data:`CHINESE`): its words are runs of two or
  three Han characters drawn from the domain's own share of a character pool, sentences are written
  without spaces and end in full-width punctuation, and the shared words are Chinese function and
  general words. The facts, synonym pairs, graded qrels, units and training files are built as for
  English; the source's BM25 negatives tokenise Han text into character bigrams as Lucene's
  CJKAnalyzer does (:func:`zsdr.data.bm25.cjk_tokenize`), since whitespace splitting reads a whole
  Chinese sentence as one token.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from zsdr.data.bm25 import BM25, cjk_tokenize, simple_tokenize
from zsdr.data.formats import BeirCounts, BeirWriter, write_manifest
from zsdr.io import atomic_write

FUNCTION_WORDS = ["the", "of", "and", "in", "is", "for", "with", "to", "on", "by", "was", "that", "as", "at"]
GENERAL_WORDS = [
    "study", "report", "value", "level", "effect", "case", "group", "system", "result", "method", "change",
    "number", "area", "part", "form", "type", "rate", "model", "source", "record", "measure", "sample",
    "period", "factor", "point", "range", "series", "class", "field", "unit",
]
ONSETS = ["b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "qu", "r", "s", "t", "v", "w", "x", "z",
          "br", "ch", "cl", "dr", "fl", "gr", "kr", "pl", "pr", "sh", "sk", "st", "th", "tr", "vl", "zh"]
NUCLEI = ["a", "e", "i", "o", "u", "y", "ai", "au", "ea", "ei", "ie", "oa", "oo", "ou", "ue"]
CODAS = ["", "", "", "n", "r", "s", "l", "m", "x", "k", "t", "nd", "rk", "st"]

ESSENTIAL_TEMPLATES = [
    "The {attr} of {ent} is {val} {cue}.",
    "{ent} has a {attr} of {val} {cue}.",
    "For {ent} the {attr} was {val} {cue}.",
    "In {topic} work the {attr} of {ent} is {val} {cue}.",
]
DISTRACTOR_TEMPLATES = ["The {attr} of {ent} is {val} {cue}.", "By contrast {ent} has a {attr} of {val} {cue}."]
INTRO_TEMPLATES = ["{ent} is a {t1} {t2} in the {t3} {g}.", "{ent} belongs to the {t1} {g} of {t2}."]
QUERY_TEMPLATES = ["what is the {attr} of {ent}", "{ent} {attr}", "which {attr} does {ent} have",
                   "{attr} of {ent} {topic}"]

ZH_FUNCTION_WORDS = ["的", "是", "在", "和", "与", "为", "有", "了", "对", "中", "及", "其", "也", "被"]
ZH_GENERAL_WORDS = [
    "研究", "报告", "数值", "水平", "影响", "案例", "群体", "系统", "结果", "方法", "变化", "数量", "区域", "部分",
    "形式", "类型", "比率", "模型", "来源", "记录", "测量", "样本", "时期", "因素", "要点", "范围", "系列", "类别",
    "领域", "单元",
]
ZH_ESSENTIAL_TEMPLATES = [
    "{ent}的{attr}是{val}{cue}。",
    "{ent}具有{val}{cue}的{attr}。",
    "就{ent}而言，{attr}为{val}{cue}。",
    "在{topic}工作中，{ent}的{attr}是{val}{cue}。",
]
ZH_DISTRACTOR_TEMPLATES = ["{ent}的{attr}是{val}{cue}。", "相比之下，{ent}的{attr}为{val}{cue}。"]
ZH_INTRO_TEMPLATES = ["{ent}是{t3}{g}里的一种{t1}{t2}。", "{ent}属于{t2}的{t1}{g}。"]
ZH_QUERY_TEMPLATES = ["{ent}的{attr}是什么", "{ent}{attr}", "{ent}有怎样的{attr}？", "{topic}方面{ent}的{attr}"]
# Han characters the Chinese domains make their words from (each domain draws its own two thirds of them);
# none occurs in the shared words and templates above.
_ZH_POOL = (
    "安奥巴百班邦宝保贝本比碧冰波博布彩灿苍草策层茶昌长常超朝辰城澄池赤冲崇楚川船春纯慈聪翠达丹道德登"
    "迪典殿丁鼎东冬栋斗杜端敦朵恩帆梵方芳飞丰风枫峰凤福富甘刚钢高歌格耕宫谷固冠光广贵桂国海寒汉航豪"
    "浩禾河荷鹤恒红宏鸿虹湖华桦怀欢环焕黄辉徽慧吉佳嘉坚建剑江姜角杰金锦晋京晶景静九居菊巨君骏凯康柯"
    "可克坤兰岚蓝朗浪乐雷磊黎礼力立丽莲良亮林琳玲凌岭龙隆楼鲁陆路露伦罗洛绿马麦曼茂梅美门萌蒙孟米密"
    "妙民敏明铭墨木牧穆南楠宁农诺欧帕盘培佩鹏平萍朴浦齐奇琪启千谦钱乾强桥琴青清晴庆秋泉群然仁荣蓉瑞"
    "润若森山杉善尚韶绍升声胜圣诗石实世书舒树双霜顺朔松颂苏素肃涛桃腾天田铁庭通彤桐童拓万旺威薇维伟"
    "卫温文稳沃乌吴武舞西希溪锡喜霞夏仙先贤香湘翔晓笑新欣星兴雄秀旭轩宣雪勋迅雅亚岩炎彦艳燕阳杨瑶耀"
    "叶一伊依宜怡毅翼银英樱鹰盈颖永勇优悠友佑瑜宇羽雨玉郁元园远月悦云允泽增展湛章昭哲珍真振征正之芝"
    "志智忠钟洲竹卓紫宗尊左佐"
)
ZH_CHARACTERS = "".join(dict.fromkeys(c for c in _ZH_POOL if c not in set("".join(
    ZH_FUNCTION_WORDS + ZH_GENERAL_WORDS + ZH_ESSENTIAL_TEMPLATES + ZH_DISTRACTOR_TEMPLATES + ZH_INTRO_TEMPLATES
    + ZH_QUERY_TEMPLATES))))


@dataclass(frozen=True)
class Style:
    """How a language writes a domain: its shared words, templates, word maker and how words and sentences join."""

    language: str
    function_words: list[str]
    general_words: list[str]
    essential: list[str]
    distractor: list[str]
    intro: list[str]
    query: list[str]
    sep: str                                  # between the words of a sentence and between sentences
    stop: str                                 # a background sentence's last character
    maker: Callable[..., object]              # (rng, used) -> a word maker
    tokenize: Callable[[str], list[str]]      # BM25's tokens when mining the source's negatives


class _HanWordMaker:
    """Chinese pseudo-words: two or three Han characters from a domain's own share of :data:`ZH_CHARACTERS`,
    unique across all domains."""

    def __init__(self, rng: np.random.Generator, used: set[str]):
        self.rng = rng
        self.used = used
        self.chars = list(rng.choice(list(ZH_CHARACTERS), size=len(ZH_CHARACTERS) * 2 // 3, replace=False))

    def word(self, syllables: tuple[int, int] = (2, 3)) -> str:
        for _ in range(1000):
            n = int(self.rng.integers(syllables[0], syllables[1] + 1))
            w = "".join(self.chars[int(self.rng.integers(len(self.chars)))] for _ in range(max(2, n)))
            if w not in self.used and len(set(w)) == len(w):
                self.used.add(w)
                return w
        raise RuntimeError("vocabulary exhausted; lower the mini sizes or add characters")

    def words(self, n: int, syllables: tuple[int, int] = (2, 3)) -> list[str]:
        return [self.word(syllables) for _ in range(n)]


@dataclass
class Domain:
    """One generated domain: its vocabulary and facts."""

    name: str
    role: str
    topics: list[list[str]]              # topic -> topic words
    entities: list[str]
    entity_topic: list[int]
    attributes: list[tuple[str, str]]     # concept -> (form 0, form 1)
    cues: list[list[str]]                 # concept -> words that accompany its statements (like units)
    values: list[str]
    facts: np.ndarray                     # entity x attribute -> value index


class _WordMaker:
    """Pseudo-words from a domain's own syllable inventory; unique across all domains."""

    def __init__(self, rng: np.random.Generator, used: set[str]):
        self.rng = rng
        self.used = used
        self.onsets = list(rng.choice(ONSETS, size=len(ONSETS) * 2 // 3, replace=False))
        self.nuclei = list(rng.choice(NUCLEI, size=len(NUCLEI) * 2 // 3, replace=False))
        self.codas = CODAS

    def word(self, syllables: tuple[int, int] = (2, 3)) -> str:
        for _ in range(1000):
            n = int(self.rng.integers(syllables[0], syllables[1] + 1))
            parts = [self.onsets[int(self.rng.integers(len(self.onsets)))]
                     + self.nuclei[int(self.rng.integers(len(self.nuclei)))]
                     + self.codas[int(self.rng.integers(len(self.codas)))] for _ in range(n)]
            w = "".join(parts)
            if w not in self.used and len(w) >= 4:
                self.used.add(w)
                return w
        raise RuntimeError("vocabulary exhausted; lower the mini sizes or add syllables")

    def words(self, n: int, syllables: tuple[int, int] = (2, 3)) -> list[str]:
        return [self.word(syllables) for _ in range(n)]


ENGLISH = Style("en", FUNCTION_WORDS, GENERAL_WORDS, ESSENTIAL_TEMPLATES, DISTRACTOR_TEMPLATES, INTRO_TEMPLATES,
                QUERY_TEMPLATES, sep=" ", stop=".", maker=_WordMaker, tokenize=simple_tokenize)
CHINESE = Style("zh", ZH_FUNCTION_WORDS, ZH_GENERAL_WORDS, ZH_ESSENTIAL_TEMPLATES, ZH_DISTRACTOR_TEMPLATES,
                ZH_INTRO_TEMPLATES, ZH_QUERY_TEMPLATES, sep="", stop="。", maker=_HanWordMaker, tokenize=cjk_tokenize)
STYLES = {s.language: s for s in (ENGLISH, CHINESE)}
"""The languages a mini domain can be written in (its config key `language`, default en)."""


def _build_domain(name: str, role: str, n_docs: int, cfg: dict, rng: np.random.Generator, used: set[str],
                  style: Style = ENGLISH) -> Domain:
    maker = style.maker(rng, used)
    topics = [maker.words(cfg["topic_words"]) for _ in range(cfg["topics"])]
    n_entities = math.ceil(n_docs / cfg["docs_per_entity"])
    entities = [maker.word((2, 3)).capitalize() for _ in range(n_entities)]
    entity_topic = [i % cfg["topics"] for i in range(n_entities)]
    attributes = [_synonyms(maker) for _ in range(cfg["attributes"])]
    cues = [maker.words(2, (2, 2)) for _ in attributes]
    values = maker.words(cfg["values"], (2, 3))
    facts = rng.integers(0, len(values), size=(n_entities, len(attributes)))
    return Domain(name, role, topics, entities, entity_topic, attributes, cues, values, facts)


def _synonyms(maker) -> tuple[str, str]:
    """Two surface forms of one attribute concept (Chinese: with no character in common, so no bigram or
    character of one matches the other)."""
    first = maker.word((2, 2))
    if not isinstance(maker, _HanWordMaker):
        return first, maker.word((2, 2))
    for _ in range(1000):
        second = maker.word((2, 2))
        if not set(second) & set(first):
            return first, second
    raise RuntimeError("vocabulary exhausted; lower the mini sizes or add characters")


def _short(name: str) -> str:
    return name.removeprefix("mini-")


def _pick(rng: np.random.Generator, seq):
    return seq[int(rng.integers(len(seq)))]


def _background(rng: np.random.Generator, topic: list[str], style: Style = ENGLISH) -> str:
    n = int(rng.integers(6, 11))
    words = []
    for i in range(n):
        r = rng.random()
        if r < 0.45:
            words.append(_pick(rng, topic))
        elif r < 0.7:
            words.append(_pick(rng, style.general_words))
        else:
            words.append(_pick(rng, style.function_words))
    words[0] = words[0].capitalize()
    if style.language == "zh":  # a clause break: a full-width comma after the middle word
        words[n // 2 - 1] += "，"
    return style.sep.join(words) + style.stop


def _generate_docs(dom: Domain, n_docs: int, cfg: dict, rng: np.random.Generator, style: Style = ENGLISH):
    """Passages: one per (entity, focus attribute); returns list of dicts."""
    docs = []
    lo, hi = cfg["sentences"]
    n_attr = len(dom.attributes)
    k = min(cfg["docs_per_entity"], n_attr - 1)
    focus_sets = [rng.choice(n_attr, size=k, replace=False).tolist() for _ in dom.entities]
    for e, ent in enumerate(dom.entities):
        focus = focus_sets[e]
        t = dom.entity_topic[e]
        topic = dom.topics[t]
        same_topic = [i for i in range(len(dom.entities)) if dom.entity_topic[i] == t and i != e]
        for a in focus:
            if len(docs) == n_docs:
                return docs
            form = int(rng.integers(2))
            val = dom.values[dom.facts[e, a]]
            template = _pick(rng, style.essential)
            slots = dict(attr=dom.attributes[a][form], ent=ent, val=val, topic=_pick(rng, topic),
                         cue=_pick(rng, dom.cues[a]))
            essential = template.format(**slots)
            essential = essential[0].upper() + essential[1:]
            intro = _pick(rng, style.intro).format(
                ent=ent, t1=_pick(rng, topic), t2=_pick(rng, topic), t3=_pick(rng, topic),
                g=_pick(rng, style.general_words))
            distractors = [_distractor(dom, rng, _pick(rng, same_topic) if same_topic else e, focus_sets, style)
                           for _ in range(cfg["distractors"])]
            n_sent = int(rng.integers(lo, hi + 1))
            body = distractors + [_background(rng, topic, style)
                                  for _ in range(max(0, n_sent - 2 - len(distractors)))]
            insert_at = int(rng.integers(len(body) + 1))
            body.insert(insert_at, essential)
            sentences = [intro] + body
            ess_pos = 1 + insert_at
            text = style.sep.join(sentences)
            # the value's own slot (a value may also occur inside a longer word before it)
            start = sum(len(s) + len(style.sep) for s in sentences[:ess_pos]) + len(
                template[:template.index("{val}")].format(**slots))
            title = f"{ent}{style.sep}{_pick(rng, topic)}" if cfg["titles"] else ""
            docs.append({"id": f"{_short(dom.name)}-d{len(docs)}", "entity": e, "attribute": a,
                         "form": form, "title": title, "text": text, "sentences": sentences,
                         "essential": ess_pos, "answer": val, "answer_start": start})
    return docs


def _distractor(dom: Domain, rng: np.random.Generator, other: int, focus_sets: list[list[int]],
                style: Style = ENGLISH) -> str:
    """A true fact about another entity, on an attribute no query asks about for that entity.

    It shares words with other queries (the entity name, sometimes the attribute) without
    answering any of them, so every passage that answers a query is labelled.
    """
    free = [a for a in range(len(dom.attributes)) if a not in focus_sets[other]]
    oa = _pick(rng, free)
    return _pick(rng, style.distractor).format(
        attr=dom.attributes[oa][int(rng.integers(2))], ent=dom.entities[other], val=dom.values[dom.facts[other, oa]],
        cue=_pick(rng, dom.cues[oa]))


def _make_query(dom: Domain, doc: dict, rate: float, rng: np.random.Generator,
                style: Style = ENGLISH) -> tuple[str, int]:
    form = 1 - doc["form"] if rng.random() < rate else doc["form"]
    t = dom.entity_topic[doc["entity"]]
    text = _pick(rng, style.query).format(attr=dom.attributes[doc["attribute"]][form],
                                              ent=dom.entities[doc["entity"]], topic=_pick(rng, dom.topics[t]))
    return text, form


def _unit_record(qid: str, doc: dict) -> dict:
    return {"query-id": qid, "corpus-id": doc["id"], "sentences": doc["sentences"], "essential": doc["essential"],
            "answer": doc["answer"], "answer_start": doc["answer_start"]}


def _write_domain(out: Path, dom: Domain, docs: list[dict], splits: dict[str, list[tuple[str, str, dict]]],
                  graded: bool, cfg: dict, rng: np.random.Generator, style: Style = ENGLISH) -> BeirCounts:
    by_entity: dict[int, list[dict]] = {}
    for d in docs:
        by_entity.setdefault(d["entity"], []).append(d)
    with BeirWriter(out) as w:
        for d in docs:
            w.add_doc(d["id"], d["title"], d["text"])
        units = []
        for split, items in splits.items():
            for qid, text, doc in items:
                w.add_query(qid, text)
                w.add_qrel(split, qid, doc["id"], 2 if graded else 1)
                if graded:
                    for other in by_entity[doc["entity"]]:
                        if other["id"] != doc["id"]:
                            w.add_qrel(split, qid, other["id"], 1)
                units.append(_unit_record(qid, doc))
        with open(w.root / "units.jsonl", "w", encoding="utf-8") as fh:
            for u in units:
                fh.write(json.dumps(u, ensure_ascii=False) + "\n")
        if "train" in splits:
            _write_training_files(w.root, docs, splits["train"], cfg, rng, style)
    return w.counts


def _write_training_files(root: Path, docs: list[dict], train: list[tuple[str, str, dict]], cfg: dict,
                          rng: np.random.Generator, style: Style = ENGLISH) -> None:
    """BM25 hard negatives (top-k minus the positive) and MS MARCO-style text triples."""
    index = BM25([f"{d['title']} {d['text']}".strip() for d in docs], ids=[d["id"] for d in docs],
                 tokenize=style.tokenize)
    text_of = {d["id"]: d["text"] for d in docs}
    k = cfg["negatives"]
    hits = index.search({qid: q for qid, q, _ in train}, k=k + 1)
    with open(root / "negatives.jsonl", "w", encoding="utf-8") as neg_fh, \
            open(root / "triples.train.tsv", "w", encoding="utf-8") as tri_fh:
        for qid, query, doc in train:
            negs = [did for did in hits.get(qid, {}) if did != doc["id"]][:k]
            if len(negs) < k:  # pad with random passages when BM25 finds too few
                pool = [d["id"] for d in docs if d["id"] != doc["id"] and d["id"] not in negs]
                negs += [pool[i] for i in rng.choice(len(pool), size=k - len(negs), replace=False).tolist()]
            neg_fh.write(json.dumps({"qid": qid, "pos": [doc["id"]], "neg": {"bm25": negs}}) + "\n")
            # like MS MARCO's triples.train.small, whose negatives are drawn from BM25's top 1000,
            # the triples' negatives are drawn from the BM25 list, not its head
            picks = sorted(rng.choice(len(negs), size=min(cfg["triples_per_query"], len(negs)), replace=False))
            for did in (negs[int(i)] for i in picks):
                tri_fh.write(f"{query}\t{text_of[doc['id']]}\t{text_of[did]}\n")


def generate(cfg: dict, root: str | Path, language: str = "en", described_as: str = "mini.json") -> dict:
    """Generate every domain of ``cfg`` (the ``mini`` config section, or ``mini_zh`` with ``language="zh"``)
    under ``root``.

    Returns the description also written to ``root/<described_as>``. The same config gives
    byte-identical files.
    """
    from zsdr.io import check_output_dir, check_output_file

    if language not in STYLES:
        raise ValueError(f"mini benchmark language must be one of {sorted(STYLES)}, got {language!r}")
    style = STYLES[language]
    root = Path(root)
    names = [d["name"] for d in cfg["domains"]]
    if len(set(names)) != len(names):
        raise ValueError(f"mini domains named twice: {sorted(n for n in set(names) if names.count(n) > 1)}")
    for name in names:   # every folder may be written, before any is
        check_output_dir(root / name, "dataset")
    check_output_file(root / described_as)
    seed = int(cfg["seed"])
    used: set[str] = set(style.function_words) | set(style.general_words)
    described = {"seed": seed, "domains": {}}
    if language != "en":
        described["language"] = language
    for index, dcfg in enumerate(cfg["domains"]):
        rng = np.random.default_rng(np.random.SeedSequence([seed, index]))
        params = {**cfg, "titles": dcfg.get("titles", False)}
        dom = _build_domain(dcfg["name"], dcfg["role"], dcfg["docs"], params, rng, used, style)
        docs = _generate_docs(dom, dcfg["docs"], params, rng, style)
        order = rng.permutation(len(docs)).tolist()
        if dom.role == "source":
            n_train, n_dev = dcfg["train_queries"], dcfg["dev_queries"]
            wanted = {"train": n_train, "dev": n_dev}
        else:
            wanted = {"test": dcfg["test_queries"]}
        if sum(wanted.values()) > len(docs):
            raise ValueError(f"mini domain {dom.name}: {sum(wanted.values())} queries need as many passages, "
                             f"only {len(docs)} configured")
        splits, pos = {}, 0
        for split, n in wanted.items():
            items = []
            for j in order[pos:pos + n]:
                text, _ = _make_query(dom, docs[j], cfg["synonym_rate"], rng, style)
                items.append((f"{_short(dom.name)}-{split}-q{len(items)}", text, docs[j]))
            splits[split] = items
            pos += n
        counts = _write_domain(root / dom.name, dom, docs, splits, graded=dom.role == "target", cfg=params, rng=rng,
                               style=style)
        what = "mini benchmark" if language == "en" else f"mini benchmark ({language})"
        write_manifest(root / dom.name, counts, name=dom.name, group="mini", role=dom.role, language=language,
                       description=f"{what} {dom.role} domain (synthetic, seed {seed})",
                       license="generated by zsdr (public domain)")
        described["domains"][dom.name] = {
            "role": dom.role, "counts": counts.as_dict(), "titles": params["titles"],
            "synonyms": [list(p) for p in dom.attributes],
            "entities": len(dom.entities), "topics": len(dom.topics),
        }
    with atomic_write(root / described_as) as fh:
        json.dump(described, fh, indent=1, **({} if language == "en" else {"ensure_ascii": False}))
    return described

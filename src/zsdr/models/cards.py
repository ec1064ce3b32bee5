"""Model cards: a Hugging Face style ``README.md`` in every trained model folder a table-1 system uses.

The card (:func:`card_text`) says what the model is (system, paper, the recipe's description and
provenance), how it was trained (from its ``training.json`` and the recipe's method sections), how
its texts are encoded (``zsdr.json``), how to load it (zsdr, sentence-transformers, ``zsdr export``)
and its scores on the evaluation datasets of the scale (from ``metrics/``): first the folder's own,
as it loads with no arguments, then, labelled, those of each table-1 system that encodes otherwise
(DDR's systems plug the REM into each target's own DAM; a system may encode a dataset at other
lengths, or RMSC's the source in an rmsc.source_context other than the model's own). Rule ``model_cards`` writes every card in one job (:func:`write_cards`), after
evaluation, with ``results/model_cards.json`` listing them. :func:`export_card_text` is the card of a
folder ``zsdr export`` writes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from zsdr.io import atomic_write, read_json
from zsdr.models.st_files import st_loads

# The paper each method section comes from (a recipe without one is a dense-retrieval baseline).
PAPERS = {
    "ddr": "DDR: Zhan et al., 2022, *Disentangled Modeling of Domain and Relevance for Adaptable Dense Retrieval*",
    "berm": "BERM: Xu et al., ACL 2023, *BERM: Training the Balanced and Extractable Representation for "
            "Matching to Improve Generalization Ability of Dense Retrieval*",
    "modir": "MoDIR: Xin et al., Findings of ACL 2022, *Zero-Shot Dense Retrieval with Momentum Adversarial "
             "Domain Invariant Representations*",
    "cocodr": "COCO-DR: Yu et al., EMNLP 2022, *COCO-DR: Combating Distribution Shifts in Zero-Shot Dense "
              "Retrieval with Contrastive and Distributionally Robust Learning*",
    "rmsc": "RMSC: Fang et al., AAAI 2024, *Enhancing Zero-shot Dense Retrieval with Relevance and Domain "
            "Mixed Supervision* (no official code)",
    "baseline": "a dense-retrieval baseline (DPR / ANCE / Margin-MSE distillation) as the five papers train it",
}
SECTIONS = {"rem": "ddr", "berm": "berm", "modir": "modir", "dro": "cocodr", "mixture": "rmsc"}


def recipe_paper(recipe: dict, pretrained: set[str] | None = None) -> str:
    """The key of :data:`PAPERS` a recipe belongs to: its method section, a COCO pretrained init, else
    a baseline."""
    for section, paper in SECTIONS.items():
        if recipe.get(section):
            return paper
    if pretrained and recipe.get("init") in pretrained:
        return "cocodr"
    return "baseline"


def _relative(path: str, folder: Path) -> str:
    return os.path.relpath(path, folder).replace(os.sep, "/")


def base_model(init: str | None, folder: Path) -> str | None:
    """The card's ``base_model``: a hub id as it is, a local model folder relative to ``folder``
    (where it exists), else ``None``."""
    if not init:
        return None
    if Path(init).is_dir():
        return _relative(init, folder)
    if not init.startswith((".", "/", "~")) and init.count("/") <= 1:
        return init
    return None


def _score(path: str, metric: str) -> float | None:
    value = read_json(path, "evaluate the run again").get("aggregate", {}).get(metric)
    return None if value is None else float(value)


def _scores(entry: dict, metric: str) -> dict[str, dict[str, float | None]]:
    """system -> dataset -> the metric's value from each metrics file of the entry."""
    return {system: {dataset: _score(path, metric) for dataset, path in files.items()}
            for system, files in entry["metrics"].items()}


def _own_files(entry: dict) -> dict[str, str]:
    """dataset -> the metrics file of the folder itself (an entry without ``own``: its only system's)."""
    if "own" in entry:
        return entry["own"]
    return {d: f for files in entry["metrics"].values() for d, f in files.items()}


def _own_scores(entry: dict, metric: str) -> dict[str, float | None]:
    return {dataset: _score(path, metric) for dataset, path in _own_files(entry).items()}


def _score_lines(entry: dict, metric: str, source: str) -> list[str]:
    """The card's scores section: the folder's own row, then a labelled row per system that encodes otherwise."""
    own, own_files = _own_scores(entry, metric), _own_files(entry)
    datasets = sorted({d for files in entry["metrics"].values() for d in files} | set(own),
                      key=lambda d: (d != source, d))
    header = ["", *datasets]
    lines = [f"## Scores ({metric})", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]

    def cells(values: dict) -> list[str]:
        return [f"{values[d]:.4f}" if values.get(d) is not None else "-" for d in datasets]

    lines.append("| " + " | ".join(["this folder, loaded as it is", *cells(own)]) + " |")
    systems, other = list(entry["metrics"]), {}
    for system, files in entry["metrics"].items():
        if any(own_files.get(d) != f for d, f in files.items()):
            other[system] = files
            why = (entry.get("why") or {}).get(system)
            label = f"`{system}` (table 1's system" + (f": {why}" if why else "") + ")"
            lines.append("| " + " | ".join([label, *cells({d: _score(f, metric) for d, f in files.items()})]) + " |")
    same = [s for s in systems if s not in other]
    lines += ["", f"`{source}` is the source dataset (its dev split); the others are zero-shot targets (their test "
              "split). The first row scores this folder as it loads with no arguments (zsdr, or its "
              "sentence-transformers files where it has them)"
              + (f"; table 1's system(s) {', '.join(f'`{s}`' for s in same)} load it so" if same else "")
              + (", the rows below are table 1's systems that encode otherwise, with their scores" if other else "")
              + ". From `metrics/<dataset>/<system>.json`.", ""]
    return lines


def _data(training: dict) -> str:
    """The training data of a ``training.json``: the dataset (and negatives), or RMSC's supervision sets."""
    if training.get("sets"):
        return "; ".join(f"{e.get('name')}: `{e.get('pairs') or e.get('dataset')}`" for e in training["sets"])
    out = f"`{training.get('dataset')}`"
    return out + (f", negatives `{training['negatives']}`" if training.get("negatives") else "")


def _yaml_list(values: list[str]) -> str:
    return "\n".join(f"- {v}" for v in values)


def card_text(folder: str | os.PathLike, entry: dict, metric: str, scale: str, source: str) -> str:
    """The README.md of the trained model in ``folder`` (``entry``: one value of the plan's
    ``model_cards()``; ``source``: the source dataset)."""
    folder = Path(folder)
    training = read_json(folder / "training.json", "train the model again") if (folder / "training.json").is_file() \
        else read_json(_run_folder(folder) / "training.json", "train the model again")
    settings = read_json(folder / "zsdr.json", "train the model again")
    retrieval = settings.get("retrieval") or {}
    effective = {**{k: v for k, v in settings.items() if k not in ("version", "backbone", "rem", "retrieval")},
                 **retrieval}
    info = training.get("recipe") or {}
    train = training.get("train") or {}
    paper = entry["paper"]
    st = st_loads(folder)
    has_rem = bool(settings.get("rem"))
    soft = effective.get("soft_tokens")
    base = base_model(training.get("init"), folder)
    tags = ["zsdr", "dense-retrieval", "zero-shot", f"{paper}" if paper != "baseline" else "baseline", f"scale-{scale}"]
    front = ["---", f"library_name: {'sentence-transformers' if st else 'transformers'}",
             "pipeline_tag: sentence-similarity", "tags:", _yaml_list(tags)]
    if base:
        front.append(f"base_model: {base}")
    front.append("---")
    systems = ", ".join(f"`{s}`" for s in entry["metrics"])
    lines = [*front, "", f"# {entry['run']}", "",
             f"The model of the retrieval system(s) {systems} of zsdr's `results/table1.csv` at {scale} scale, "
             f"trained by recipe `{entry['recipe']}`" + (f" (episode {info['episode']} of {info['episodes']})"
                                                         if info.get("episodes", 1) > 1 else "") + ".",
             "", f"* Method: {PAPERS[paper]}.",
             f"* Description: {info.get('description') or entry.get('description') or '-'}",
             f"* Provenance of the settings: {info.get('provenance') or '-'}"]
    if info.get("target"):
        lines.append(f"* Trained for the target dataset `{info['target']}` (one model per target).")
    if folder.parent.name == "snapshots":
        lines.append(f"* This is the snapshot `{folder.name}` of run `{entry['run']}`, the step its system is "
                     "evaluated at.")
    lines += ["", "## Training", "",
              "| setting | value |", "|---|---|",
              f"| initial model | `{training.get('init')}` |",
              f"| training data | {_data(training)} |",
              f"| loss | {training.get('loss') or 'contrastive (negative log-likelihood, in-group negatives)'}"
              + (f", {training['negatives_per_query']} negative(s) per query"
                 if training.get("negatives_per_query") else "") + " |",
              f"| steps | {training.get('steps')} ({training.get('processes', 1)} process(es)) |",
              f"| global batch | {training.get('global_batch')} (batch {train.get('batch_size')} x grad-acc "
              f"{train.get('grad_accum')} x processes) |",
              f"| optimiser | {train.get('optimizer')}, lr {train.get('lr')}, {train.get('schedule')} schedule, "
              f"warmup {train.get('warmup_steps') if train.get('warmup_ratio') is None else 'ratio %g' % train['warmup_ratio']} |",
              f"| examples | {training.get('examples')} |", ""]
    if entry.get("sections"):
        lines += ["Method sections of the recipe (loss terms and modules):", "", "```json",
                  json.dumps(entry["sections"], indent=1, sort_keys=True), "```", ""]
    lines += ["## Encoding", "",
              f"* pooling `{effective.get('pooling')}`, similarity `{effective.get('similarity')}`"
              + (" (vectors L2-normalised)" if effective.get("similarity") == "cosine" else ""),
              f"* queries: at most {effective.get('query_max_length')} tokens, prefix "
              f"{json.dumps(effective.get('query_prefix', ''))}",
              f"* documents: at most {effective.get('doc_max_length')} tokens, prefix "
              f"{json.dumps(effective.get('doc_prefix', ''))}, format `{effective.get('doc_format')}`"
              + (" (the string `title + ' ' + text`, stripped)" if effective.get("doc_format") == "title_space_text"
                 else "")]
    if retrieval:
        lines.append(f"* the retrieval system encodes with {json.dumps(retrieval)} over the training settings "
                     "(`retrieval` in zsdr.json; loading applies it)")
    if soft:
        lines.append(f"* RMSC soft tokens ({json.dumps(soft)}): zsdr inserts the inference context "
                     f"{soft.get('inference')} (`[T] x [H]`) around every text; on the source dataset the "
                     "pipeline encodes in `rmsc.source_context`")
    lines += ["", "## Loading", "", "```python", "from zsdr.models.encoder import Encoder", ""]
    if has_rem:
        lines += ["enc = Encoder.from_pretrained(\"path/to/this/folder\")  # its DAM with its REM (rem/), merged",
                  "# on a target dataset the system plugs the REM into that dataset's DAM:",
                  "enc = Encoder.from_pretrained(\"models/dams/<dam>--<dataset>\", rem=\"path/to/this/folder/rem\")"]
    else:
        lines += ["enc = Encoder.from_pretrained(\"path/to/this/folder\")  # settings from zsdr.json"]
    lines += ["q = enc.encode_queries([\"a query\"])", "d = enc.encode_docs([{\"title\": \"\", \"text\": \"a passage\"}])",
              "```", ""]
    if st:
        lines += ["sentence-transformers (documents at their maximum length; set the query length for queries):",
                  "", "```python", "from sentence_transformers import SentenceTransformer", "",
                  "model = SentenceTransformer(\"path/to/this/folder\")",
                  "docs = model.encode([\"title text\"])", f"model.max_seq_length = {effective.get('query_max_length')}",
                  "queries = model.encode([\"a query\"])", "```", ""]
    elif (folder / "modules.json").is_file():
        lines += ["sentence-transformers refuses this folder, saying why (it would load it without "
                  + ("its REM" if has_rem else "the soft tokens" if soft else "its input convention")
                  + "): use the folder `zsdr export` writes.", ""]
    lines += ["A standalone plain Hugging Face / sentence-transformers folder"
              + (" (LoRA merged; the parallel adapter as the folder's own code: `trust_remote_code=True`)"
                 if has_rem else "")
              + (" (the soft-token inference context written by the tokenizer)" if soft else "") + ":", "",
              "```bash", "zsdr export path/to/this/folder exported/"]
    if has_rem:
        lines.append("zsdr export models/dams/<dam>--<dataset> exported-<dataset>/ --rem path/to/this/folder/rem")
    lines += ["```", ""]
    lines += _score_lines(entry, metric, source)
    return "\n".join(lines)


def _run_folder(folder: Path) -> Path:
    """The run folder of a snapshot (``<run>/snapshots/step-N``), else the folder itself."""
    return folder.parent.parent if folder.parent.name == "snapshots" else folder


def write_cards(entries: dict[str, dict], metric: str, scale: str, source: str, index: str | os.PathLike) -> None:
    """Write every card (``entries``: folder -> entry, the plan's ``model_cards()``) and the index."""
    listing: dict[str, Any] = {}
    for folder, entry in entries.items():
        text = card_text(folder, entry, metric, scale, source)
        with atomic_write(Path(folder) / "README.md") as fh:
            fh.write(text)
        listing[folder] = {"run": entry["run"], "recipe": entry["recipe"], "paper": entry["paper"],
                           "own": _own_scores(entry, metric), "scores": _scores(entry, metric)}
    with atomic_write(index) as fh:
        fh.write(json.dumps({"metric": metric, "scale": scale, "cards": listing}, indent=1) + "\n")


def export_card_text(name: str, info: dict, source_card: str | None = None) -> str:
    """The README.md of a folder ``zsdr export`` wrote (``name``: its folder name; ``info``: its
    ``zsdr_export.json``): what it holds and how to load it, and the scores section of the source
    folder's card (``source_card``), whose vectors it reproduces, where there is one."""
    enc = info.get("encoder") or {}
    rem, soft, remote = info.get("rem"), info.get("soft_tokens"), bool(info.get("trust_remote_code"))
    tags = ["zsdr", "dense-retrieval", "zero-shot", "exported"]
    lines = ["---", "library_name: sentence-transformers", "pipeline_tag: sentence-similarity", "tags:",
             _yaml_list(tags), "---", "", f"# {name}", "",
             f"A standalone export by `zsdr export` of the zsdr model folder `{Path(str(info.get('source'))).name}`"
             + (f" with the relevance module (REM) `{rem}`" if rem else "")
             + ": it needs neither zsdr nor the pipeline's folders (`zsdr_export.json` says what was exported).", ""]
    if rem:
        lines.append("* DDR's REM: " + ("LoRA merged into the weights" if info.get("lora_merged") else "no LoRA")
                     + ("; the parallel adapter kept as this folder's own code, `zsdr_rem.py` (load with "
                        "`trust_remote_code=True`)" if remote else "") + ".")
    if soft:
        lines.append(f"* RMSC's soft tokens: the tokenizer writes the inference context {info.get('soft_token_context')} "
                     "(`[CLS] [T] x [H] [SEP]`) around every text.")
    lines += [f"* pooling `{enc.get('pooling')}`, similarity `{enc.get('similarity')}`"
              + (" (vectors L2-normalised)" if enc.get("similarity") == "cosine" else ""),
              f"* queries: at most {enc.get('query_max_length')} tokens, prefix {json.dumps(enc.get('query_prefix', ''))}",
              f"* documents: at most {enc.get('doc_max_length')} tokens, prefix {json.dumps(enc.get('doc_prefix', ''))}, "
              f"format `{enc.get('doc_format')}`", "", "## Loading", "", "```python",
              "from sentence_transformers import SentenceTransformer", "",
              f"model = SentenceTransformer(\"path/to/this/folder\"{', trust_remote_code=True' if remote else ''})",
              "docs = model.encode([\"title text\"])", f"model.max_seq_length = {enc.get('query_max_length')}",
              "queries = model.encode([\"a query\"])", "```", "",
              "zsdr reads the folder too, with these settings and without running its code:", "", "```python",
              "from zsdr.models.encoder import Encoder", "",
              "enc = Encoder.from_pretrained(\"path/to/this/folder\")", "```", ""]
    scores = _section(source_card or "", "## Scores")
    if scores:
        lines += [scores.replace("this folder, loaded as it is", "the exported folder (and this one)"), ""]
    return "\n".join(lines)


def _section(card: str, heading: str) -> str:
    """The section of a Markdown card that starts with ``heading``, up to the next heading of its level."""
    start = card.find(f"\n{heading}")
    if start < 0:
        return ""
    end = card.find("\n## ", start + 1)
    return card[start + 1:end if end >= 0 else len(card)].strip()

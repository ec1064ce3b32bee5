"""Stage 11, summaries: one readable line per planned training and pretraining, which a dry run shows
(`snakemake -n`), and :class:`Note`, the text a job's message shows without it counting as a parameter."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from zsdr.plan.berm import Berm
from zsdr.plan.recipes import Recipes
from zsdr.plan.resources import Resources
from zsdr.plan.systems import Systems



WEAK_NEGATIVES = {
    "pair": "weak negatives drawn with each pair by its positive's rule",
    "corpus": "weak negatives from the corpus",
    "pseudo": "weak negatives from other pairs' positives",
}
"""How a mixture's summary line names config `rmsc.weak_negatives` (the schema's enum)."""


class Note:
    """Text a job's ``message:`` shows (``{params.summary}``), kept out of what Snakemake compares when it decides
    which jobs to rerun: Snakemake's params check compares plain data (strings, numbers, lists, dicts) and
    skips other objects, so rewording a summary, or a resource in it, reruns nothing."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = str(text)

    def __str__(self) -> str:
        return self.text

    def __format__(self, spec: str) -> str:
        return format(self.text, spec)

    def __repr__(self) -> str:
        return f"Note({self.text!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Note) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __reduce__(self):
        return (Note, (self.text,))


@dataclass(frozen=True)
class Summaries:
    recipes: Recipes
    systems: Systems
    resources: Resources
    berm: Berm
    inference_precision: str       # dense.precision

    @staticmethod
    def note(text: str) -> Note:
        """``text`` for a job's message, not compared for reruns (:class:`Note`)."""
        return Note(text)

    def head_summary(self, spec: dict[str, Any]) -> str:
        """Where a cls_linear_ln training's head comes from ("" for other poolings)."""
        info = spec.get("info", {})
        pooling = spec.get("encoder", {}).get("pooling") or self.recipes.recipe_pooling(info.get("recipe"))
        if pooling != "cls_linear_ln":
            return ""
        if spec.get("head") == "new":
            return f"; ANCE head: new (seed {spec.get('encoder', {}).get('head_seed', 0)})"
        return f"; ANCE head: from checkpoint {spec['init']}"

    def spec_summary(self, spec: dict[str, Any], launch: dict[str, Any]) -> str:
        """One line with the hyperparameters a dry run shows (`snakemake -n`)."""
        from zsdr.plan.card import budget_text

        t = spec["train"]
        length = budget_text(self, spec, launch)
        b = spec.get("berm")
        berm = (
            f"; + BERM R1 x{b['r1_weight']:g} ("
            + ("KL / units, official code" if b["r1_reduction"] == "mean" else "KL, paper")
            + f") + R2 x{b['r2_weight']:g} ("
            + (
                "double softmax, official code"
                if b.get("double_softmax")
                else "cross-entropy, paper"
            )
            + "), labels "
            f"{self.berm.labels['variant']} BM25 + {self.berm.labels['delta']:g} x reader "
            f"{self.berm.labels['reader']}"
            if b
            else ""
        )
        enc = spec.get("encoder", {})
        target_q = (spec.get("modir") or {}).get("target_query_max_length")
        lengths = (
            f"q{enc.get('query_max_length', '-')}/d{enc.get('doc_max_length', '-')}"
            + (f", target q{target_q}" if target_q else "")
            if spec["kind"] in ("bi_encoder", "mixture")
            else (
                f"{spec['max_length']}"
                if spec["kind"] in ("mlm", "coco")
                else f"pair {spec['max_length']}"
            )
        )
        if spec["kind"] == "mixture":
            sets = ", ".join(
                "{} ({}{})".format(
                    x["name"],
                    os.path.basename(x["pairs"]) if x.get("pairs") else "qrels",
                    "" if x.get("size") is None else f", size {x['size']}",
                )
                for x in spec["sets"]
            )
            soft = spec.get("soft_tokens")
            tokens = (
                f"soft tokens k {soft['k']} ([S]/[T] x [H]/[W], inference [T] x [H]; on "
                f"{self.recipes.datasets.source} {self.systems.rmsc.soft_context(self.systems.rmsc.source_context)} [X] rmsc.source_context)"
                if soft
                else "no soft tokens"
            )
            sizes = ", ".join(
                f"{x['name']} {x['size']}" for x in spec["sets"] if x.get("size") is not None
            )
            t = spec["train"]
            weak_negatives = WEAK_NEGATIVES[spec["sets"][0]["negatives"]]
            choices = (
                f"open choices [X]: weak-set sizes ({sizes or 'all pairs'}), {weak_negatives}, temperature {1 / spec['scale']:g}, "
                f"{t['max_steps']} steps, warmup {_warmup(t)}, lengths "
                f"q{spec['encoder'].get('query_max_length', '-')}/d{spec['encoder'].get('doc_max_length', '-')}, "
                f"{t['precision']}"
            )
            data = (
                f"loss contrastive x{spec['scale']:g} with 1 random negative + in-batch negatives"
                f"{' of the same (domain, relevance) group' if spec['group_negatives'] else ''} "
                f"({weak_negatives}) over sets {sets}; {tokens}; "
                f"{choices}"
            )
        elif spec.get("negatives"):
            data = (
                f"loss {spec.get('loss', 'lce')} with {spec['negatives_per_query']} negative(s) "
                f"from {os.path.basename(spec['negatives'])}"
            )
            if spec.get("examples") == "query_triples":
                data += (
                    "; batches of consecutive (query, positive, negative) triples, one per negative of "
                    "a query (the official ANCE-family loaders)"
                )
        elif spec["kind"] == "coco":
            co = spec["contrastive_weight"]
            contrastive = f"span contrastive x{co:g} (global batch, no temperature), " if co else ""
            backbone = ", backbone MLM" if spec["late_mlm"] else ""
            corpora = ", ".join(
                os.path.basename(os.path.dirname(os.path.dirname(f))) for f in spec["spans"]
            )
            head = "new" if spec.get("head") == "new" else f"from checkpoint {spec['init']}"
            data = (
                f"{contrastive}Condenser head MLM ({spec['head_layers']} layers from layer "
                f"{spec['skip_from']}; head {head}){backbone} {spec['mlm_probability']:.0%} "
                f"whole-word, on {len(spec['spans'])} corpora: {corpora}"
            )
        elif spec["kind"] == "generator":
            data = (
                f"seq2seq token cross-entropy, passage -> query, on the {spec['split']} pairs of "
                f"{spec['dataset']} (queries <= {spec['query_max_length']} tokens)"
            )
        elif spec["kind"] == "mlm":
            data = (
                f"MLM {spec['mlm_probability']:.0%} (80/10/10) on the {spec['dataset']} corpus, "
                f"random crops"
            )
        else:
            data = f"loss start/end cross-entropy on the {spec['units']} answers"
        mine = spec.get("info", {}).get("mine")
        if mine:
            data += (
                f" (mined: top-{mine['depth']} of {mine.get('system', 'the previous model')} at "
                f"{mine.get('lengths', 'its lengths')}, {mine['sample']} sampled per query)"
            )
        data += self.head_summary(spec) if spec["kind"] == "bi_encoder" else ""
        rem = spec.get("rem")
        if rem:
            parts = [
                (
                    f"LoRA r {rem['lora_r']} alpha {rem.get('lora_alpha') or rem['lora_r']:g} on "
                    + "+".join(rem["lora_targets"])
                    if rem.get("lora_r")
                    else ""
                ),
                (
                    f"parallel adapter {rem['adapter_bottleneck']} x{rem['adapter_scaling']:g}"
                    if rem.get("adapter_bottleneck")
                    else ""
                ),
            ]
            data += f"; REM only, DAM frozen: {' + '.join(x for x in parts if x)}"
        m = spec.get("modir")
        if m:
            queue = {
                "momentum": f"momentum n {m['momentum_steps']}",
                "single": "single (n 1)",
                "repeat": f"repeat x{m['momentum_steps']}",
            }[m["mode"]]
            halving = (
                f" halving every {m['lambda_half_life']:g} steps"
                if m.get("lambda_half_life")
                else ""
            )
            data += (
                f"; + MoDIR {m['loss']} loss vs {os.path.basename(m['target'])}, {queue} in chunks "
                f"of {m['chunk']}, lambda0 {m['lambda0']:g}{halving}, classifier lr "
                f"{m['classifier_lr']:g} (logits clipped at {m['logit_clip']:g})"
            )
        d = spec.get("dro")
        if d:
            data += (
                f"; + iDRO over K {d['clusters']} query clusters (beta {d['beta']:g}, rho "
                f"{d['rho']:g}, gamma {d['gamma']:g}, eps {d['eps']:g}, "
                f"gradients of the last {d['grad_layers']} layers)"
                if d["kind"] == "idro"
                else f"; + GroupDRO over K {d['clusters']} query clusters (fraction "
                f"{d.get('fraction')}, ema {d.get('ema')})"
            )
        if t.get("snapshot_every"):
            length += f", a snapshot every {t['snapshot_every']} steps"
        per_dataset = (
            self.systems.dataset_lengths_text(spec["info"]["recipe"])
            if spec["kind"] in ("bi_encoder", "mixture") and spec["info"].get("recipe") in self.systems.by_name
            else ""
        )
        inference = (
            f"; inference {self.inference_precision}"
            + (f", at other lengths on {per_dataset}" if per_dataset else "")
            if spec["kind"] in ("bi_encoder", "mixture")
            else ""
        )
        memory = f"; memory {self.resources.training_memory(spec, launch)[1]}"
        dropout = (
            ""
            if "dropout" not in spec
            else (
                "; dropout as the checkpoint"
                if spec["dropout"] is None
                else f"; dropout {spec['dropout']:g}"
            )
        )
        return (
            f"init {spec['init']}; {data}; batch {t['batch_size']} x "
            f"{launch['processes'] * launch['nodes']} process(es) x grad-acc {t['grad_accum']}; "
            f"{t['optimizer']} lr {t['lr']:g}, {t['schedule']}, warmup "
            f"{_warmup(t)}; {length}; max length {lengths}; {t['precision']}{dropout}{berm}"
            f"{inference}{memory}"
        )


def build_summaries(config: dict[str, Any], recipes: Recipes, systems: Systems, resources: Resources,
                    berm: Berm) -> Summaries:
    return Summaries(recipes=recipes, systems=systems, resources=resources, berm=berm,
                     inference_precision=config["dense"]["precision"])


def _warmup(t: dict) -> str:
    """A train section's warmup as a summary writes it: its steps, or its ratio of the run's steps."""
    if t.get("warmup_ratio") is not None:
        return f"ratio {float(t['warmup_ratio']):g} of the steps"
    return str(t["warmup_steps"])

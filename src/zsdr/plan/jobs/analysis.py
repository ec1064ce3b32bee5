"""The jobs of rules/analysis.smk: BERM's unit-level analyses (Tables 5 and 6) of one system on one dataset."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zsdr.plan.jobs import RuleJob, builds
from zsdr.plan.params import Settings


@dataclass(frozen=True)
class BermUnitAnalysisJob(RuleJob):
    """Unit variance (R1), essential-unit accuracy (R2) and unit similarity of one dense system on one dataset."""

    model: str                  # what the system loads on the dataset (a folder or a Hugging Face id)
    dataset: str                # the dataset's folder
    options: dict[str, Any]     # the system's encoder settings on the dataset
    meta: dict[str, str]        # dataset, system: written beside the numbers
    scale: float                # the inverse temperature of the system's logits (1.0 if no recipe trained it)
    dense: Settings             # config `dense` (batch size, device; keep_embeddings not compared)


@builds(BermUnitAnalysisJob, "berm_unit_analysis")
def berm_unit_analysis_job(plan: Any, wc: Any) -> BermUnitAnalysisJob:
    systems = plan.systems
    return BermUnitAnalysisJob(
        model=systems.dense_model(wc.system, wc.dataset), dataset=plan.datasets.data_folder(wc.dataset),
        options=systems.encoder_options(wc.system, wc.dataset), meta={"dataset": wc.dataset, "system": wc.system},
        scale=systems.system_scale(wc.system), dense=plan.dense_settings,
    )

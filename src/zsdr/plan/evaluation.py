"""Stage 9, evaluation: which systems are encoded, searched and scored on which datasets, by which jobs.

Table 1's systems are evaluated on every dataset by one job per dataset (`evaluate_table1`); the further
systems that paper tables, figures and BERM's loss-weight grid need are evaluated one job per (dataset, system),
so that table 1 never waits for them. The Chinese mini domains (`mini_zh`), which only DDR's tables read, are
evaluated one job per (dataset, system) for every system, table 1's included. `cluster.group_datasets` encodes and searches every table-1 dense system on
every one-shard evaluation dataset in one job (`dense_search_group`); `cluster.scatter_search` merges per-shard
searches of a corpus of several shards.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from zsdr.plan import checks
from zsdr.plan.datasets import alternation
from zsdr.plan.figures import Figures
from zsdr.plan.systems import Systems
from zsdr.plan.tables import Tables


@dataclass(frozen=True)
class Evaluation:
    systems: Systems
    eval_systems: list[str]          # table 1's systems with one model on every dataset
    extra_eval_systems: list[str]    # every other system a table or figure reads
    scatter_search: bool
    group_datasets: list[str]        # the datasets of the group job (none without `cluster.group_datasets`)
    group_systems: list[str]         # the systems of the group job
    apart_datasets: list[str]        # datasets outside table 1 (the Chinese mini domains): one job per (dataset, system)

    def evaluate_dataset_constraint(self) -> str:
        """The datasets `evaluate` (every table-1 system on one dataset) takes: any but :attr:`apart_datasets`,
        whose cells only DDR's tables read (a wildcard regex; any dataset where there are none)."""
        if not self.apart_datasets:
            return ".+"
        return f"(?!(?:{alternation(self.apart_datasets)})/)[^/]+"

    @property
    def datasets(self) -> Any:
        return self.systems.datasets

    def scattered(self, dataset: str) -> bool:
        """Whether `dense_search` merges per-shard searches: `cluster.scatter_search` and > 1 shard."""
        return self.scatter_search and len(self.datasets.shards(dataset)) > 1

    def dense_search_inputs(self, wc: Any) -> list[str]:
        """The corpus shard folders `dense_search` searches or, scattered, every shard's top-k file."""
        paths = self.datasets.paths
        if self.scattered(wc.dataset):
            root = f"{paths.runs}/{wc.dataset}/.shards/{wc.system}"
            return [f"{root}/{s}.npz" for s in self.datasets.shards(wc.dataset)]
        return [f"{paths.embeddings}/{wc.dataset}/{wc.system}/{s}" for s in self.datasets.shards(wc.dataset)]

    def group_jobs(self, system: str) -> list[dict[str, Any]]:
        """What `dense_search_group` does for ``system``, one entry per dataset of the group: the model and
        encoder settings the per-dataset jobs would use, the dataset, its evaluation split and the
        embeddings folder and run it writes (the same paths as `encode_corpus` and `dense_search`)."""
        paths = self.datasets.paths
        return [
            {
                "dataset": f"{paths.data}/{d}",
                "split": self.datasets.eval_split(d),
                "model": self.systems.dense_model(system, d),
                "options": self.systems.encoder_options(system, d),
                "embeddings": f"{paths.embeddings}/{d}/{system}/{self.datasets.shards(d)[0]}",
                "run": f"{paths.runs}/{d}/{system}.trec",
            }
            for d in self.group_datasets
        ]

    def group_inputs(self, wc: Any) -> list[str]:
        """Every dataset marker and model file the group job of ``wc.system`` reads."""
        files: list[str] = []
        for d in self.group_datasets:
            files.append(self.datasets.dataset_marker(d))
            files += self.systems.dense_model_input(SimpleNamespace(system=wc.system, dataset=d))
        return list(dict.fromkeys(files))

    def embedding_donor(self, system: str, dataset: str) -> str | None:
        """The dataset whose embeddings of ``system`` an encode job of ``dataset`` reads for the documents both
        corpora hold (`datasets.shared_corpus`): only where the system encodes both alike (the same model,
        REM and settings) and an `encode_corpus` job encodes ``dataset`` (not a group job); else None."""
        donor = self.datasets.shared_corpus.get(dataset)
        if donor is None or (dataset in self.group_datasets and system in self.group_systems):
            return None
        s = self.systems
        same = (s.routed(system, dataset) == s.routed(system, donor)
                and s.dense_model(system, dataset) == s.dense_model(system, donor)
                and s.encoder_options(system, dataset) == s.encoder_options(system, donor))
        return donor if same else None

    def donor_inputs(self, wc: Any) -> list[str]:
        """What an encode job reads of its donor (:meth:`embedding_donor`): the donor's shards and the overlap map."""
        donor = self.embedding_donor(wc.system, wc.dataset)
        if donor is None:
            return []
        embeddings = self.datasets.paths.embeddings
        return [f"{embeddings}/{donor}/{wc.system}/{s}" for s in self.datasets.shards(donor)] + [
            self.datasets.overlap_file(wc.dataset, donor)
        ]


def build_evaluation(config: dict[str, Any], systems: Systems, tables: Tables, figures: Figures) -> Evaluation:
    by_name, datasets = systems.by_name, systems.datasets
    checks.check_evaluation(config, datasets.evaluated, datasets.eval_split)
    table1 = tables.table1_systems
    # A system with a model per target (MoDIR, RMSC) exists only on its targets and the source, so it is no
    # eval system; on table 1's datasets, where every table-1 system exists, rules/evaluate.smk's
    # evaluate_table1 evaluates them with the others in the dataset's one job.
    evaluated = [s for s in dict.fromkeys(table1) if "modir" not in by_name[s] and "mixture" not in by_name[s]]
    ddr_figure4 = figures.ddr.figure4
    extra = sorted(
        ({s for cells in tables.cells.values() for _, s in cells}
         | set(table1)
         | set(figures.berm.grid.values())
         | set(systems.figure4_systems.values())
         | {ddr_figure4["system"], ddr_figure4["baseline"]}
         | set(systems.modir_step_systems.values())
         | set(systems.modir.modir_case())
         | figures.cocodr_eval_systems
         | set(systems.rmsc_step_systems.values())
         | set(systems.own.values()))  # the model cards' own systems
        - set(evaluated)
    )
    # The Chinese mini domains are no table-1 datasets: the systems DDR's tables read there (table-1 systems
    # among them) are evaluated one job per (dataset, system), not every table-1 system on them.
    apart = list(datasets.mini_zh)
    if apart:
        extra = sorted(set(extra) | {s for cells in tables.cells.values() for d, s in cells if d in apart})
    cluster = config["cluster"]
    # `cluster.group_datasets`: table 1 needs each of the group's runs, so the group computes nothing the
    # table does not read; larger corpora (more than one shard) keep their encode and search jobs.
    one_shard = [d for d in datasets.evaluated if len(datasets.shards(d)) == 1]
    group = cluster["group_datasets"] and len(one_shard) > 1
    return Evaluation(
        systems=systems, eval_systems=evaluated, extra_eval_systems=extra,
        # not in `dense`, which many rules pass whole as a param, so switching it re-runs no encoding,
        # mining or training
        scatter_search=cluster["scatter_search"],
        group_datasets=one_shard if group else [],
        group_systems=[s for s in dict.fromkeys(table1) if by_name[s]["kind"] == "dense"] if group else [],
        apart_datasets=apart,
    )

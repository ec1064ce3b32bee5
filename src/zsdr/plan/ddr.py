"""DDR: domain adaption modules (DAMs), their MLM specs and figure-4 snapshots."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from zsdr.models.released import RELEASES


class DdrPlan:
    """DDR: domain adaption modules (DAMs), their MLM specs and figure-4 snapshots (a part of :class:`zsdr.plan.core.Plan`)."""

    def dam_path(self, chain: str, where: str) -> str:
        self.dam_parts(chain, where)
        return f"{self.MODELS}/dams/{chain}"

    def dam_settings(self, corpus: str) -> dict[str, Any]:
        """The MLM settings of a DAM trained on ``corpus``: `ddr.dam.source` for the source corpus (or
        `ddr.dam.sources`), else `ddr.dam.target`, with `ddr.dam.datasets.<corpus>` merged over them.
        """
        dam = self.DDR["dam"]
        role = "source" if corpus in (dam.get("sources") or [self.SOURCE]) else "target"
        base, over = dam[role], dam["datasets"].get(corpus, {})
        return {
            **base,
            **over,
            "train": {**base["train"], **over.get("train", {})},
            "role": role,
        }

    def figure4_dam(self, dataset: str) -> str:
        """The target DAM whose snapshots DDR Figure 4 evaluates on ``dataset``."""
        recipe = self.RECIPES[self.FIGURE4["system"]]
        return f"{recipe.get('target_dam') or recipe['init']}{self.DAM_SEP}{dataset}"

    def figure4_steps(self, dataset: str) -> list[int]:
        """The snapshot steps of ``dataset``'s target DAM (0 = the source DAM, before adaptation)."""
        every = self.FIGURE4["snapshot_every"]
        total = self.dam_settings(dataset)["train"].get("max_steps")
        if not total:
            raise ValueError(
                f"config key ddr.figure4: the target DAM of {dataset} trains by epochs; give "
                f"ddr.dam.target.train.max_steps (or ddr.dam.datasets.{dataset}.train.max_steps) so "
                f"the snapshot steps are known when the DAG is built"
            )
        return [0, *range(every, total, every)]

    def dam_launch(self, chain: str) -> dict[str, Any]:
        """How the DAM ``chain``'s job starts (its last corpus's settings may set `processes`)."""
        return self.launch_settings(self.dam_settings(chain.split(self.DAM_SEP)[-1]))

    def dam_spec(self, chain: str) -> dict[str, Any]:
        """The resolved MLM spec (zsdr.pretrain.mlm) of the DAM ``chain``."""
        where = f"DAM {chain}"
        base, corpora = self.dam_parts(chain, where)
        corpus = corpora[-1]
        prev = self.DAM_SEP.join([base, *corpora[:-1]])
        init = self.model_ref(base) if len(corpora) == 1 else self.dam_path(prev, where)
        s = self.dam_settings(corpus)
        train = self.train_settings(s)
        if corpus in self.FIGURE4_DATASETS and chain == self.figure4_dam(corpus):
            train["snapshot_every"] = self.FIGURE4["snapshot_every"]
        return {
            "kind": "mlm",
            "init": init,
            "dataset": f"{self.DATA}/{corpus}",
            "max_length": s["max_length"],
            "mlm_probability": self.DDR["dam"]["mlm_probability"],
            "tie_embeddings": self.DDR["dam"]["tie_embeddings"],
            "max_examples": s.get("max_examples"),
            "out": f"{self.MODELS}/dams/{chain}",
            "checkpoint_dir": f"{self.MODELS}/.checkpoints/dam-{chain}",
            "dropout": self.TRAINING["dropout"],
            "train": train,
            "info": {
                "dam": chain,
                "corpus": corpus,
                "role": s["role"],
                "from": prev if len(corpora) > 1 else base,
            },
        }

    def figure4_points(self) -> list[dict[str, Any]]:
        """DDR Figure 4: per target, the REM on each snapshot of its DAM (and the final DAM), with the
        DAM folder whose snapshots.json gives each snapshot's training time."""
        fig = self.FIGURE4["system"]
        return [
            {
                "dataset": d,
                "step": n,
                "system": self.FIGURE4_SYSTEMS.get((d, n), fig),
                "final": (d, n) not in self.FIGURE4_SYSTEMS,
                "metrics": f"{self.METRICS}/{d}/{self.FIGURE4_SYSTEMS.get((d, n), fig)}.json",
            }
            for d in self.FIGURE4_DATASETS
            for n in [*self.figure4_steps(d), None]
        ]

    def rem_models(self, key: tuple[str, int]) -> dict[str, str]:
        """DDR Table 5: the trained folder of every produced REM system of a table (its rem/rem.json
        holds the parameter counts; the folder's config.json is what the train rule declares).
        """
        spec = self.TABLE_SPECS[key]
        if not any(getattr(e, "rem", None) for e in spec.datasets):
            return {}
        out = {}
        for entry in spec.systems:
            produced = [s for s in getattr(entry, "systems", ()) if s in self.SYSTEMS]
            if produced and "rem_of" in self.SYSTEMS[produced[0]]:
                out[entry.key] = self.SYSTEMS[produced[0]]["model"]
        return out

    def scattered(self, dataset: str) -> bool:
        """Whether `dense_search` merges per-shard searches: `cluster.scatter_search` and > 1 shard."""
        return self.SCATTER_SEARCH and len(self.shards(dataset)) > 1

    def dense_search_inputs(self, wc: Any) -> list[str]:
        """The corpus shard folders `dense_search` searches or, scattered, every shard's top-k file."""
        if self.scattered(wc.dataset):
            root = f"{self.RUNS}/{wc.dataset}/.shards/{wc.system}"
            return [f"{root}/{s}.npz" for s in self.shards(wc.dataset)]
        return [f"{self.EMBEDDINGS}/{wc.dataset}/{wc.system}/{s}" for s in self.shards(wc.dataset)]

    def group_jobs(self, system: str) -> list[dict[str, Any]]:
        """What `dense_search_group` does for ``system``, one entry per dataset of the group: the model and
        encoder settings the per-dataset jobs would use, the dataset, its evaluation split and the
        embeddings folder and run it writes (the same paths as `encode_corpus` and `dense_search`)."""
        return [
            {
                "dataset": f"{self.DATA}/{d}",
                "split": self.eval_split(d),
                "model": self.dense_model(system, d),
                "options": self.encoder_options(system, d),
                "embeddings": f"{self.EMBEDDINGS}/{d}/{system}/{self.shards(d)[0]}",
                "run": f"{self.RUNS}/{d}/{system}.trec",
            }
            for d in self.GROUP_DATASETS
        ]

    def group_inputs(self, wc: Any) -> list[str]:
        """Every dataset marker and model file the group job of ``wc.system`` reads."""
        files: list[str] = []
        for d in self.GROUP_DATASETS:
            files.append(self.dataset_marker(d))
            files += self.dense_model_input(SimpleNamespace(system=wc.system, dataset=d))
        return list(dict.fromkeys(files))

    def _setup_ddr(self) -> None:
        """Resolve DDR Figure 4's settings and datasets."""
        self.FIGURE4 = self.DDR["figure4"]
        self.FIGURE4_DATASETS = self.FIGURE4.get("datasets") or self.TARGETS

    def _setup_ddr_2(self) -> None:
        """Resolve `cluster.scatter_search`; with `offline`, check that every configured model is on this machine."""
        # `cluster.scatter_search`: how the search is spread over jobs (not in `dense`, which many rules pass
        # whole as a param, so switching it re-runs no encoding, mining or training).
        self.SCATTER_SEARCH = self.CLUSTER["scatter_search"]

        # `cluster.group_datasets`: every table-1 dense system is encoded and searched on every evaluation
        # dataset of one shard by one job (`dense_search_group`) instead of two jobs per dataset. Table 1
        # needs each of these runs, so the group computes nothing the table does not read; larger corpora
        # (more than one shard) keep their encode and search jobs.
        _datasets = [d for d in self.EVAL_DATASETS if len(self.shards(d)) == 1]
        _group = self.CLUSTER["group_datasets"] and len(_datasets) > 1
        self.GROUP_DATASETS = _datasets if _group else []
        self.GROUP_SYSTEMS = (
            [s for s in dict.fromkeys(self.TABLE1_SYSTEMS) if self.SYSTEMS[s]["kind"] == "dense"]
            if _group
            else []
        )

        # With `offline: true`, every model the config names must be on this machine when planning starts,
        # whether or not the requested targets use it (each is checked once).
        if self.config["offline"]:
            for _name, _s in self.config["systems"].items():
                if isinstance(_s.get("model"), str) and _s["model"] not in RELEASES:
                    self.on_this_machine(_s["model"])
            for _name, _r in self.RECIPES.items():
                if isinstance(_r.get("init"), str):
                    self.model_ref(_r["init"])

"""Tables made of dataset statistics: DDR Table 1, COCO-DR Tables 5 and 6 (and BERM Tables 7, 8).

Their specs (``kind: data``) have ``stat`` columns; the pipeline writes one ``stats/<dataset>.json``
(:func:`zsdr.evaluation.analysis.dataset_statistics`, one split or ``{split: statistics}``) and one
``shift/<target>.json`` (:func:`zsdr.evaluation.analysis.shift_statistics`) per dataset, in separate
jobs. COCO-DR Table 6 also has two nDCG@10 differences (ANCE - BM25), read from metrics files.

Every builder takes ``{dataset: path or dict}`` mappings (or plain lists of paths, named after the
dataset), and renders through :func:`zsdr.tables.render.render_table`, so the layout, published
numbers, deltas and file formats are those of every other paper table. Group rows (CQADupStack)
sum counts over their forums and weight averages by documents / queries; similarities are the
mean over the forums.
"""

from __future__ import annotations

import os

import pandas as pd

from zsdr.tables.inputs import files_by_dataset
from zsdr.tables.cells import required_cells, required_statistics
from zsdr.tables.render import render_table
from zsdr.tables.spec import load_spec
from zsdr.tables.spec_model import TableSpec

__all__ = ["render_data_table", "ddr_table1", "cocodr_table5", "cocodr_table6", "required_inputs"]


def _by_dataset(source) -> dict:
    """``{dataset: path or dict}`` from such a mapping or from a list of ``<dataset>.json`` paths."""
    if source is None:
        return {}
    if isinstance(source, dict):
        return dict(source)
    return files_by_dataset(source)


def required_inputs(spec: TableSpec, produced_systems=(), datasets_override=None, *,
                    available_datasets=None) -> dict[str, list]:
    """Everything a data table reads: ``{"stats": [dataset], "shift": [dataset], "metrics": [(dataset, system)]}``."""
    out: dict[str, list] = dict(required_statistics(spec, datasets_override, available_datasets=available_datasets))
    out["metrics"] = required_cells(spec, set(produced_systems), datasets_override,
                                    available_datasets=available_datasets)
    return out


def render_data_table(spec: TableSpec, out_csv: str | os.PathLike, out_md: str | os.PathLike, *, stats=None,
                      shift=None, metric_files: dict | None = None, scale: str = "paper",
                      datasets_override: list[str] | None = None, splits: dict | None = None,
                      produced_systems=None, available_datasets=None) -> pd.DataFrame:
    """Render any ``kind: data`` spec from statistics (and, for metric-difference columns, metrics)."""
    return render_table(spec, metric_files or {}, out_csv, out_md, scale=scale, datasets_override=datasets_override,
                        produced_systems=produced_systems, available_datasets=available_datasets,
                        stats=_by_dataset(stats), shift=_by_dataset(shift), splits=splits)


def ddr_table1(stats, out_csv: str | os.PathLike, out_md: str | os.PathLike, **kw) -> pd.DataFrame:
    """DDR Table 1: documents and queries (count, average words) of each target's evaluation split.

    ``kw``: ``scale``, ``datasets_override``, ``splits`` (evaluation split per dataset: LoTTE
    ``forum``, Multi-CPR ``dev``; default ``test``), ``available_datasets``.
    """
    return render_data_table(load_spec("ddr", 1), out_csv, out_md, stats=stats, **kw)


def cocodr_table5(stats, out_csv: str | os.PathLike, out_md: str | os.PathLike, **kw) -> pd.DataFrame:
    """COCO-DR Table 5: BEIR statistics (train pairs, dev/test queries, corpus, D/Q, lengths).

    Train pairs and dev queries need the ``train`` / ``dev`` splits in each statistics file
    (``{split: statistics}``); a split the dataset does not have leaves the cell empty.
    """
    return render_data_table(load_spec("cocodr", 5), out_csv, out_md, stats=stats, **kw)


def cocodr_table6(shift, out_csv: str | os.PathLike, out_md: str | os.PathLike, metric_files: dict | None = None,
                  **kw) -> pd.DataFrame:
    """COCO-DR Table 6: query-type and unigram weighted Jaccard vs MS MARCO, and ANCE - BM25 nDCG@10.

    ``metric_files``: ``{(dataset, system): path}`` for the difference columns (their systems
    show their reason when the run does not produce them).
    """
    return render_data_table(load_spec("cocodr", 6), out_csv, out_md, shift=shift, metric_files=metric_files, **kw)

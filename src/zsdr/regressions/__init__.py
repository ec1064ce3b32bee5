"""Reproduction regressions: the pipeline's scores of released checkpoints and BM25 against published values.

:mod:`zsdr.regressions.published` reads the published values (``published.csv``: system, dataset, metric,
value, tolerance, source); :mod:`zsdr.regressions.report` writes the report and the verdict of each row
(PASS, FAIL, NOT RUN with its reason). What is planned for which row is zsdr.plan.regressions; the
workflow's rules are rules/regressions.smk (docs/regressions.md).
"""

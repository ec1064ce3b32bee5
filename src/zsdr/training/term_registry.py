"""The registry of loss terms: a recipe section name -> ``"module:Class"`` of its term.

A recipe (and the training spec planned from it) enables a term by carrying its section; the order of
the table is the order the terms run in. It is kept apart from :mod:`zsdr.training.terms` so that the
planner reads it without importing torch, and it holds the table alone: a job's code stamp lists, instead
of this file, the entries of the sections its spec carries (:data:`zsdr.plan.code.REGISTRIES`), so a new
line retrains only the recipes that use its term. A new term is its module plus one line here: the config
schema accepts its section from the line alone (:func:`zsdr.training.term_sections.section_schema` reads
the keys, types and defaults of the term's ``config_class`` from the module's source, without importing
it, and :func:`zsdr.workflow.config_schema` adds them under ``recipes.<name>.<section>``), and the planner
passes the section into the training spec and lists the module among the training's code. A section the
schema file writes out itself (``berm``, ``modir``, ``dro``, with their descriptions) must name only keys
of the term's dataclass, and holds their defaults alone: the dataclass gives none of them
(tests/test_term_schema.py, tests/test_defaults.py).
"""

from __future__ import annotations

TERMS: dict[str, str] = {
    "berm": "zsdr.training.berm_term:BermTerm",
    "modir": "zsdr.training.modir:ModirTerm",
    "dro": "zsdr.training.idro:DroTerm",
}

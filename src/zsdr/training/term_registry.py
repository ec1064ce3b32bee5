"""The registry of loss terms: a recipe section name -> ``"module:Class"`` of its term.

A recipe (and the training spec planned from it) enables a term by carrying its section; the order of
the table is the order the terms run in. It is kept apart from :mod:`zsdr.training.terms` so that the
planner reads it without importing torch. A new term is its module plus one line here and its section
in the config schema (``recipes.<name>.<section>``).
"""

TERMS: dict[str, str] = {
    "berm": "zsdr.training.berm:BermTerm",
    "modir": "zsdr.training.modir:ModirTerm",
    "dro": "zsdr.training.idro:DroTerm",
}

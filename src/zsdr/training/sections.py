"""Config sections of the loss terms (BERM's ``berm``, MoDIR's ``modir``, COCO-DR's ``dro``): one
dataclass each, built from the recipe's dict with unknown keys named."""

from __future__ import annotations

from dataclasses import MISSING, fields
from typing import TypeVar

T = TypeVar("T")


def section_from_dict(cls: type[T], data: dict, section: str) -> T:
    """``cls(**data)``; a key ``cls`` does not define, or one it needs that ``data`` lacks, is an error
    naming ``section`` and the keys. A section's defaults are the config schema's
    (``recipes.<name>.<section>``): the workflow fills them into every spec, so a dataclass that mirrors a
    section written out in the schema holds none, and a section written by hand gives every key
    (:func:`zsdr.workflow.section_defaults` reads them from the schema)."""
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{section}: unknown key(s) {', '.join(unknown)}; expected {', '.join(sorted(known))}")
    missing = [f.name for f in fields(cls) if f.init and f.name not in data
               and f.default is MISSING and f.default_factory is MISSING]
    if missing:
        raise ValueError(f"{section}: no {', '.join(missing)} (the workflow fills every key's default from "
                         f"schemas/config.schema.yaml, recipes.<name>.{section}; a section written by hand "
                         f"gives them, e.g. from zsdr.workflow.section_defaults)")
    return cls(**data)

"""Config sections of the loss terms (BERM's ``berm``, MoDIR's ``modir``, COCO-DR's ``dro``): one
dataclass each, built from the recipe's dict with unknown keys named."""

from __future__ import annotations

from dataclasses import fields
from typing import TypeVar

T = TypeVar("T")


def section_from_dict(cls: type[T], data: dict, section: str) -> T:
    """``cls(**data)``; a key ``cls`` does not define is an error naming ``section`` and the known keys."""
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{section}: unknown key(s) {', '.join(unknown)}; expected {', '.join(sorted(known))}")
    return cls(**data)

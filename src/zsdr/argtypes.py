"""Argument types of the ``zsdr`` command: bad values are refused by argparse before any work starts,
as one line naming the argument (exit status 2)."""

from __future__ import annotations

import argparse
import math


class UsageError(Exception):
    """A combination of arguments that cannot work; ``str()`` names the arguments and the fix.
    The command exits with status 2, like argparse's own usage errors."""


def _number(value: str, kind: type):
    try:
        number = kind(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {'an integer' if kind is int else 'a number'}, got {value!r}") \
            from None
    if kind is float and not math.isfinite(number):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {value!r}")
    return number


def positive_int(value: str) -> int:
    """An integer >= 1 (sizes, depths, counts)."""
    number = _number(value, int)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value!r}")
    return number


def nonnegative_int(value: str) -> int:
    """An integer >= 0 (an index, an optional count)."""
    number = _number(value, int)
    if number < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {value!r}")
    return number


def nonnegative_float(value: str) -> float:
    number = _number(value, float)
    if number < 0:
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {value!r}")
    return number


def unit_float(value: str) -> float:
    """A number in [0, 1] (a weight, BM25's b)."""
    number = _number(value, float)
    if not 0 <= number <= 1:
        raise argparse.ArgumentTypeError(f"must be a number between 0 and 1, got {value!r}")
    return number

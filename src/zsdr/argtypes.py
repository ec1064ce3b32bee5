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


def positive_float(value: str) -> float:
    """A number > 0 (a timeout in seconds)."""
    number = _number(value, float)
    if number <= 0:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {value!r}")
    return number


def unit_float(value: str) -> float:
    """A number in [0, 1] (a weight, BM25's b)."""
    number = _number(value, float)
    if not 0 <= number <= 1:
        raise argparse.ArgumentTypeError(f"must be a number between 0 and 1, got {value!r}")
    return number


def device(value: str) -> str:
    """``cpu``, ``cuda``, ``cuda:N`` or ``mps`` (whether it exists is checked before the work starts:
    :func:`check_device`)."""
    import re

    if not re.fullmatch(r"cpu|cuda(:\d+)?|mps", value):
        raise argparse.ArgumentTypeError(f"expected cpu, cuda, cuda:N or mps, got {value!r}")
    return value


def check_device(value: str | None, argument: str = "--device") -> None:
    """Raise :class:`UsageError` when ``value`` names a device this machine does not have."""
    if not value or value == "cpu":
        return
    import torch

    if value == "mps":
        if not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
            raise UsageError(f"argument {argument}: mps is not available on this machine (fix: --device cpu)")
        return
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    index = int(value.partition(":")[2] or 0)
    if index >= count:
        have = f"{count} CUDA device{'s' if count != 1 else ''}" if count else "no CUDA device"
        fix = f"--device cuda:0 to cuda:{count - 1}" if count else "--device cpu"
        raise UsageError(f"argument {argument}: {value} is not available, this machine has {have} (fix: {fix})")


DEPENDENT = "_dependent_options"


def add_dependent(parser: argparse.ArgumentParser, *flags: str, requires: str, default=None, **kwargs):
    """Add an option that means something only with another option of the same command (``requires``: its
    flag, a switch): given without it, :func:`check_dependent` refuses the command instead of ignoring the
    option (``zsdr bm25 --fb-terms 20`` without ``--rm3``). ``default`` applies when it is not given."""
    action = parser.add_argument(*flags, default=None, **kwargs)
    listed = parser.get_default(DEPENDENT) or []
    parser.set_defaults(**{DEPENDENT: [*listed, (action.dest, flags[0], requires, default)]})
    return action


def check_dependent(args: argparse.Namespace) -> None:
    """Fill in the defaults of :func:`add_dependent` options; raise :class:`UsageError` for one given without
    the option it depends on."""
    for dest, flag, requires, default in getattr(args, DEPENDENT, None) or ():
        if getattr(args, dest) is None:
            setattr(args, dest, default)
        elif not getattr(args, requires.lstrip("-").replace("-", "_")):
            raise UsageError(f"argument {flag}: applies only with {requires}, which is not given (fix: add {requires}, "
                             f"or drop {flag})")

"""The error of bad input: :class:`DataError` names the file, the line and the fix; :class:`MultiDataError`
lists several found in one pass."""

from __future__ import annotations

import os


class DataError(ValueError):
    """Bad input data. ``str(err)`` reads ``FILE:LINE: what is wrong (fix: ...)``."""

    def __init__(self, path: str | os.PathLike | None, line: int | None, message: str, fix: str | None = None):
        self.path = None if path is None else str(path)
        self.line = line
        self.message = message
        self.fix = fix
        super().__init__(self.__str__())

    def location(self) -> str:
        if self.path is None:
            return ""
        return f"{self.path}:{self.line}" if self.line else self.path

    def __str__(self) -> str:
        loc = self.location()
        text = f"{loc}: {self.message}" if loc else self.message
        if self.fix:
            text += f" (fix: {self.fix})"
        return text


class MultiDataError(DataError):
    """Several :class:`DataError` found in one pass; the message lists them all (up to a cap)."""

    def __init__(self, errors: list[DataError], truncated: bool = False):
        self.errors = errors
        lines = [str(e) for e in errors]
        if truncated:
            lines.append("... further errors not shown")
        first = errors[0]
        super().__init__(first.path, first.line, first.message, first.fix)
        self._text = "\n".join(lines)

    def __str__(self) -> str:  # noqa: D105
        return getattr(self, "_text", super().__str__())

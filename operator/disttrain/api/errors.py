"""Validation results: errors that name the field, the value, what is allowed and the fix."""

from __future__ import annotations

import difflib
import re
import reprlib
from dataclasses import dataclass
from typing import Any, Iterable

_UNSET = object()
_INDEX = re.compile(r"\[[^\]]*\]")  # `[0]`, `[NAME]` in a field path


@dataclass(frozen=True, slots=True)
class FieldError:
    """One problem with one field. `str()` is the line users see in the CLI and status."""

    path: str
    value: Any
    problem: str
    allowed: str = ""
    hint: str = ""

    def __str__(self) -> str:
        shown = "not set" if self.value is _UNSET else f"got {_short(self.value)}"
        out = f"{self.path}: {self.problem} ({shown})"
        if self.allowed:
            out += f"; allowed: {self.allowed}"
        if self.hint:
            out += f". Fix: {self.hint}"
        return out


@dataclass(frozen=True, slots=True)
class Absent(FieldError):
    """A field names an object that is not there but may be created (a training template):
    the job waits for it, Pending, and is never failed for it. `reason` (CamelCase) says
    what it waits for, on its condition and Event."""

    reason: str = ""


@dataclass(frozen=True, slots=True)
class GuardrailWarning:
    """A spec that works but not as written: we say what we did instead."""

    reason: str  # CamelCase, shared with Events and the metrics label
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class InvalidSpec(Exception):
    """The one exception the API model raises: carries every FieldError."""

    def __init__(self, errors: Iterable[FieldError]):
        self.errors = list(errors)
        super().__init__("; ".join(str(e) for e in self.errors))


def unset() -> Any:
    """Marker for FieldError.value when the field is missing."""
    return _UNSET


def did_you_mean(value: Any, choices: Iterable[str], what: str = "values") -> str:
    """The choice `value` was likely meant to be; `what` the choices are (field names)."""
    if not isinstance(value, str):
        return ""
    choices = list(choices)
    folded = {c.lower(): c for c in choices}
    if value.lower() in folded:
        return f"use {folded[value.lower()]!r} ({what} are case-sensitive)"
    close = difflib.get_close_matches(value, choices, n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else ""


def one_of(value: Any, choices: Iterable[str], path: str) -> str:
    """The fix for a value not among `choices`: the one it was likely meant to be, else
    where each is explained."""
    return did_you_mean(value, choices) or (f"set {path} to one of the allowed values "
                                            f"({explain(path)} says what each does)")


def explain(path: str) -> str:
    """The kubectl command that documents the field at `path` (`spec.env[0].name`)."""
    return f"`kubectl explain dt.{_INDEX.sub('', path)}`"


def wrong_type(path: str, value: Any, words: str) -> FieldError:
    """A value of the wrong type, and the fix its value suggests: `words` says what the
    field takes (an integer, a string, true or false, a list, a mapping...)."""
    if words == "a string" and isinstance(value, (int, float, bool)):
        hint = f"quote it: \"{str(value).lower() if isinstance(value, bool) else value}\""
    elif words.startswith("an integer") and isinstance(value, str) and value.strip().isdigit():
        hint = f"drop the quotes: {value.strip()}"
    elif words == "an integer" and isinstance(value, float) and value.is_integer():
        hint = f"write {int(value)} (no decimal point)"
    elif words == "true or false" and isinstance(value, str):
        hint = "write true or false without quotes"
    else:
        hint = f"write {path} as {words}"
    return FieldError(path, value, f"must be {words}", "", hint)


class _BoundedRepr(reprlib.Repr):
    """repr() that stays short and cheap whatever the value: no walk of a whole alias
    bomb, no ValueError for integers of thousands of digits."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel, self.maxdict, self.maxlist, self.maxstring, self.maxother = 3, 4, 4, 70, 70

    def repr_int(self, x: int, level: int) -> str:
        return repr(x) if abs(x) < 10**30 else f"<an integer of {x.bit_length()} bits>"


_REPR = _BoundedRepr()


def _short(value: Any, limit: int = 80) -> str:
    text = _REPR.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."

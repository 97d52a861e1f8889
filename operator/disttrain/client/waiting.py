"""What `disttrain wait` and `Client.wait` decide of a job (pure): the forms `--for` takes
(a phase, a condition, a deletion, a JSONPath), whether the job met one, waits, or can never
reach it, and the --timeout durations."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from disttrain.client.jobview import WAITABLE, JobView, view_of

MET, WAITING, NEVER = "met", "waiting", "never"


def wait_decision(view: JobView, target: str) -> str:
    """Has `view` reached `target` (MET), can it still (WAITING), or never will (NEVER)?

    A job that ended (Succeeded or Failed) cannot become Running or Suspended any more;
    one that Failed cannot succeed.
    """
    if view.phase == target:
        return MET
    if view.finished:
        return NEVER
    return WAITING


@dataclass(frozen=True, slots=True)
class WaitFor:
    """What `wait --for` (and Client.wait_for) waits for; parse_wait_for reads kubectl's forms."""

    text: str
    phases: tuple[str, ...] = ()
    condition: str | None = None
    condition_status: str = "True"
    path: Any = None  # a jsonpath.Path
    value: str | None = None  # with path: the text it must print; None: that it exists
    delete: bool = False


WAIT_FORMS = ("PHASE (" + ", ".join(WAITABLE) + ")", "condition=TYPE[=STATUS]", "delete", "jsonpath={PATH}[=VALUE]")


def parse_wait_for(text: str) -> WaitFor:
    """`Succeeded`, `Running,Suspended`, `condition=Ready`, `condition=Suspended=False`,
    `delete`, `jsonpath={.status.phase}=Running` or `jsonpath={.status.checkpoint}`.
    ValueError names the forms that are allowed."""
    from disttrain.client.jsonpath import JSONPathError, expression

    forms = f"use one of: {', '.join(WAIT_FORMS)}"
    kind, sep, rest = text.partition("=")
    if text == "delete":
        return WaitFor(text, delete=True)
    if sep and kind == "condition":
        condition, _, status = rest.partition("=")
        if not condition:
            raise ValueError(f"--for {text!r}: name the condition, e.g. condition=Running; {forms}")
        return WaitFor(text, condition=condition, condition_status=status or "True")
    if sep and kind == "jsonpath":
        path, value = _split_jsonpath(rest)
        try:
            return WaitFor(text, path=expression(path), value=value)
        except JSONPathError as exc:
            raise ValueError(f"--for {text!r}: {exc}") from None
    phases = tuple(p.strip() for p in text.split(","))
    wrong = [p for p in phases if p not in WAITABLE]
    if wrong or sep:
        raise ValueError(f"--for {text!r}: {', '.join(map(repr, wrong)) or repr(kind)} is not a phase that can be "
                         f"waited for or a form of --for; {forms}")
    return WaitFor(text, phases=phases)


def _split_jsonpath(rest: str) -> tuple[str, str | None]:
    """`{.a.b}=x` -> ("{.a.b}", "x"); `.a.b=x` likewise; no `=`: no value."""
    if rest.startswith("{") and "}" in rest:
        end = rest.rindex("}") + 1
        if rest[end:].startswith("="):
            return rest[:end], rest[end + 1:]
        if rest[end:]:
            raise ValueError(f"--for jsonpath={rest!r}: after the {{PATH}} comes =VALUE or nothing")
        return rest, None
    path, sep, value = rest.partition("=")
    return path, value if sep else None


def wait_for_decision(want: WaitFor, obj: dict[str, Any]) -> str:
    """MET, WAITING or NEVER for the job's object as the API returns it.

    A phase it can no longer reach is NEVER (wait_decision); conditions and JSONPath
    values wait until met or the timeout, as kubectl's do: the operator may still write."""
    from disttrain.client.jsonpath import evaluate, text_of

    if want.phases:
        decisions = {wait_decision(view_of(obj), p) for p in want.phases}
        return MET if MET in decisions else NEVER if decisions == {NEVER} else WAITING
    if want.condition is not None:
        for c in (obj.get("status") or {}).get("conditions") or ():
            if str(c.get("type", "")).lower() == want.condition.lower():
                return MET if str(c.get("status", "")).lower() == want.condition_status.lower() else WAITING
        return WAITING
    if want.path is not None:
        found = evaluate(want.path, obj)
        met = bool(found) if want.value is None else any(text_of(v) == want.value for v in found)
        return MET if met else WAITING
    return WAITING  # delete: decided by the object going away


def parse_duration(text: str) -> float:
    """kubectl-style durations: 30s, 5m, 1h30m, 90 (seconds). ValueError names the fix."""
    text = text.strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|m|s)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"invalid duration {text!r}: use a number of seconds or units h, m, s, e.g. 90s, 5m, 1h30m")
    return sum(float(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in parts)

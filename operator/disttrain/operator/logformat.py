"""How the operator logs: `DISTTRAIN_LOG_FORMAT` mapped onto kopf's own log formats.

kopf formats every record itself (the object it concerns goes into the line, or into an
`object` key in JSON), so the operator only chooses the format (`kopf.configure(log_format=...)`):

  plain  kopf's `full` text format: `[time] logger [LEVEL] [namespace/name] message`
  json   kopf's `json` format: one JSON object a line (python-json-logger), with
         `message`, `severity`, `timestamp` and `object` (the resource it concerns)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ENV = "DISTTRAIN_LOG_FORMAT"
# our name -> kopf's LogFormat member
FORMATS = {"plain": "FULL", "json": "JSON"}


def log_format(environ: Mapping[str, str]) -> Any:
    """kopf's LogFormat for the format `environ` asks for (default plain).

    Raises SystemExit naming the variable, the bad value and the allowed ones.
    """
    import kopf

    value = environ.get(ENV, "") or "plain"
    try:
        return getattr(kopf.LogFormat, FORMATS[value.strip().lower()])
    except KeyError:
        raise SystemExit(f"{ENV}={value!r} is not a log format: set it to one of "
                         f"{', '.join(FORMATS)}") from None

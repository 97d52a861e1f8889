"""How the operator logs: `DISTTRAIN_LOG_FORMAT` mapped onto kopf's own `--log-format`.

kopf formats every record itself (the object it concerns goes into the line, or into an
`object` key in JSON), so the operator only chooses the format on kopf's command line:

  plain  kopf's `full` text format: `[time] logger [LEVEL] [namespace/name] message`
  json   kopf's `json` format: one JSON object a line (python-json-logger), with
         `message`, `severity`, `timestamp` and `object` (the resource it concerns)
"""

from __future__ import annotations

from collections.abc import Mapping

ENV = "DISTTRAIN_LOG_FORMAT"
# our name -> kopf's --log-format choice
FORMATS = {"plain": "full", "json": "json"}


def kopf_log_args(environ: Mapping[str, str]) -> list[str]:
    """The kopf CLI arguments for the log format `environ` asks for (default plain).

    Raises SystemExit naming the variable, the bad value and the allowed ones.
    """
    value = environ.get(ENV, "") or "plain"
    try:
        return [f"--log-format={FORMATS[value.strip().lower()]}"]
    except KeyError:
        raise SystemExit(f"{ENV}={value!r} is not a log format: set it to one of "
                         f"{', '.join(FORMATS)}") from None

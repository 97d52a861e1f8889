"""When a pass's status goes out and when to look at the job again: which changes may
wait for the next write, which only ride along, and the soonest reason to look again.
"""

from __future__ import annotations

from typing import Any, Mapping

from disttrain.api.status_types import DistributedTrainingStatus as Status
from disttrain.operator.core.state import ACTIVE_PHASES
from disttrain.operator.core.status import status_json


# A name held by someone else's object is looked at again this often: a squatter sends no
# events (it does not carry our labels), so nothing else would tell us it went.
SQUATTER_RECHECK_SECONDS = 5.0


def look_again_in(*, resync: float, deferred_write: float | None = None, wake: float | None = None,
                  refusal_retry: float | None = None, squatters: bool = False) -> float:
    """Seconds until a job's next pass if no event comes first: the soonest of the resync,
    a deferred status write, the plan's own wake (a back-off's end, a deadline, a TTL), the
    retry of a refused creation, and a recheck of names held by others. Never negative."""
    waits = [resync, deferred_write, wake, refusal_retry, SQUATTER_RECHECK_SECONDS if squatters else None]
    return max(0.0, min(w for w in waits if w is not None))


# Status fields whose change alone may wait for the next write (status_write): the worker
# counters move with every pod event, and a job of 8 pods starting over half a minute
# would otherwise write its status a dozen times. Goodput moves on every pass: it goes out
# with the next write of anything else, never alone.
DEFERRABLE_STATUS = frozenset({"workers", "goodput"})


RIDES_ALONG = frozenset({"goodput"})


COUNTERS_DELAY_SECONDS = 30.0


# While a job is Pending its counters move only because its pods appear and start: the
# write of Running carries them. Why a job waits is a condition (Unschedulable, an image
# pull, a refusal), written at once. A job that waits longer gets them every 5 minutes. At
# 500 jobs starting at once, the 30 s rule cost ~5 status writes a job, each one a write
# token that a pod create then waited for (bench/operator_scale.py).
PENDING_COUNTERS_DELAY_SECONDS = 300.0


def counters_delay(phase: str | None) -> float:
    """How long after the last status write a change of the counters alone may wait."""
    return PENDING_COUNTERS_DELAY_SECONDS if phase == "Pending" else COUNTERS_DELAY_SECONDS


def status_write(old: Status, new: Status, since_last_write: float) -> tuple[dict[str, Any], float | None]:
    """The status patch to send now ({}: nothing), or how many seconds it may wait. A change
    of goodput alone is never sent (it rides along with the next write); a change of the
    worker counters alone waits (counters_delay), and only while the job is active: once it
    is Suspended, Succeeded or Failed its counters go out at once, so the status never shows
    workers a job of that phase cannot have. This is where the typed status is written out."""
    patch = status_patch(status_json(old), status_json(new))
    if patch and set(patch) <= RIDES_ALONG:
        return {}, None
    delay = counters_delay(new.phase)
    if (patch and set(patch) <= DEFERRABLE_STATUS and since_last_write < delay
            and new.phase in ACTIVE_PHASES):
        return {}, delay - since_last_write
    return patch, None


def routine_write(patch: Mapping[str, Any]) -> bool:
    """A status patch of fields that may wait (the worker counters) and nothing else: it
    gives way to the writes that change what a job is (kube.ROUTINE)."""
    return bool(patch) and set(patch) <= DEFERRABLE_STATUS


def status_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """Only the top-level status fields that changed (None removes a field)."""
    return {k: v for k, v in _over(old, new).items() if old.get(k) != new.get(k)}


def _over(old: Any, new: Any) -> Any:
    """`new` as a merge patch over `old`: a merge patch merges objects key by key, so a key
    `old` has and `new` lacks is sent as None (removed), at every depth; a list or a value
    replaces what was there."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return new
    merged = {k: _over(old.get(k), v) for k, v in new.items()}
    merged.update({k: None for k in old if k not in new})
    return merged

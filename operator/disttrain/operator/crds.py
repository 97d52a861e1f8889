"""The CRDs whose objects the operator watches, followed as they go and come back.

kopf serves a resource only if the API server's discovery listed it when kopf last looked,
and it looks again only on a CRD event. A CRD created again (a `helm uninstall` with its
CRDs and a reinstall, a botched upgrade) is often Established before discovery lists it:
kopf's look comes too early, finds nothing, and no later event makes it look again, so
the operator served no job again while its liveness said 200. A deleted CRD can also end
kopf altogether: its watch reopens into a 404 and kopf stops.

So the operator keeps its own account (`CrdState`, fed by the CRD watch in handlers.py and
by discovery at start-up): once a CRD it needs is gone, it waits; when the CRD is back and
discovery lists it, kopf is started over in the same process (__main__.serve), which
finds it. While the CRD is gone there is nothing a restart could serve, so liveness stays
up and says what is missing; it fails only when a returned CRD has not been taken up
within RESUME_SECONDS.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# A CRD back and listed by discovery must be served again within this long.
RESUME_SECONDS = 60.0


def established(body: Mapping[str, Any]) -> bool:
    """The CRD's Established condition is True: the API server serves its kind."""
    conditions = (body.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


@dataclass
class CrdState:
    """What this run of kopf can serve. `needed`: the CRD names (plural.group) whose
    objects it watches; `gone`: those that were missing when it started or were deleted
    since (name -> when it was noticed, monotonic seconds); `back`: those of them that
    are Established again (name -> since when)."""

    needed: frozenset[str]
    gone: dict[str, float] = field(default_factory=dict)
    back: dict[str, float] = field(default_factory=dict)

    def missing(self, name: str, now: float) -> None:
        if name in self.needed:
            self.gone.setdefault(name, now)
            self.back.pop(name, None)

    def seen(self, name: str, body: Mapping[str, Any], deleted: bool, now: float) -> bool:
        """A CRD event. True when it brings back a needed CRD that was gone: the caller
        waits until discovery lists it, then starts kopf over."""
        if name not in self.needed:
            return False
        if deleted:
            self.missing(name, now)
            return False
        if name in self.gone and name not in self.back and established(body):
            self.back[name] = now
            return True
        return False

    def stuck(self, now: float) -> list[str]:
        """The needed CRDs that came back more than RESUME_SECONDS ago and are still not
        served: what liveness fails on."""
        return sorted(name for name, since in self.back.items() if now - since > RESUME_SECONDS)

    def describe(self) -> dict[str, str]:
        """For the liveness answer: each needed CRD, served or why not."""
        return {name: "back, about to be served" if name in self.back else
                "not installed: no job of this kind is served until it is created" if name in self.gone
                else "served" for name in sorted(self.needed)}

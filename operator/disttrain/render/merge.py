"""podTemplate merge: the user's partial pod spec over ours.

Maps merge key by key (the user's scalar wins; a null is no setting, so
`securityContext: null` cannot strip the pod's hardening), lists of named items (containers,
volumes, env, ports) merge by name, other lists are appended. Fields disttrain owns
are refused earlier by api.validate, so a merge cannot break the pod contract.
"""

from __future__ import annotations

import copy
from typing import Any


def merge(base: Any, overlay: Any) -> Any:
    if isinstance(base, dict) and isinstance(overlay, dict):
        out = dict(base)
        for key, value in overlay.items():
            if value is None:  # null is "not set" (as the schema check reads it): it removes nothing of ours
                continue
            out[key] = merge(base[key], value) if key in base else copy.deepcopy(value)
        return out
    if isinstance(base, list) and isinstance(overlay, list):
        return _merge_lists(base, overlay)
    return copy.deepcopy(overlay)


def _merge_lists(base: list, overlay: list) -> list:
    named = all(isinstance(x, dict) and "name" in x for x in [*base, *overlay])
    if not named:
        return [*base, *copy.deepcopy(overlay)]
    out = list(base)
    position = {item["name"]: i for i, item in enumerate(out)}
    for item in overlay:
        if item["name"] in position:
            i = position[item["name"]]
            out[i] = merge(out[i], item)
        else:
            position[item["name"]] = len(out)
            out.append(copy.deepcopy(item))
    return out

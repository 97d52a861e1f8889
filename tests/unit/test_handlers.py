"""The two places where we bend kopf's defaults, checked against the pinned kopf: a kopf
upgrade that changes them fails here, not in a cluster."""

from __future__ import annotations

import kopf

from disttrain_operator import handlers
from disttrain_operator.api.types import PLURAL
from disttrain_operator.settings import NoDiffBase


def test_daemons_do_not_ask_for_a_finalizer():
    spawning = kopf.get_default_registry()._spawning
    ours = [h for h in spawning.get_all_handlers() if h.fn in (handlers.reconcile, handlers.watch_progress)]
    assert len(ours) == 2 and all(h.selector.any_name == PLURAL for h in ours)
    assert all(h.requires_finalizer is False for h in ours)


def test_no_diff_base_is_built_or_stored():
    storage = NoDiffBase()
    body = kopf.Body({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "annotations": {"a": "b"}},
                      "spec": {"containers": []}, "status": {"phase": "Running"}})
    patch = kopf.Patch()
    assert storage.build(body=body) == {}
    assert storage.fetch(body=body) is None
    storage.store(body=body, patch=patch, essence={"spec": {}})
    assert not patch

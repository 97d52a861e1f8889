"""Where we set kopf's defaults, checked against the pinned kopf: a kopf upgrade that
changes them fails here, not in a cluster."""

from __future__ import annotations

import kopf

from disttrain.operator.settings import NoDiffBase


def test_no_diff_base_is_built_or_stored():
    storage = NoDiffBase()
    body = kopf.Body({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "annotations": {"a": "b"}},
                      "spec": {"containers": []}, "status": {"phase": "Running"}})
    patch = kopf.Patch()
    assert storage.build(body=body) == {}
    assert storage.fetch(body=body) is None
    storage.store(body=body, patch=patch, essence={"spec": {}})
    assert not patch

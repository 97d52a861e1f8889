"""podTemplate merge: what a user's template adds to the pod the operator renders, and
what it can never take away."""

from __future__ import annotations

import copy

import pytest

from disttrain.render.merge import merge


def test_maps_merge_key_by_key_and_the_overlay_scalar_wins():
    assert merge({"a": 1, "b": {"c": 2, "d": 3}}, {"b": {"c": 9}, "e": 5}) == {"a": 1, "b": {"c": 9, "d": 3}, "e": 5}


@pytest.mark.parametrize("base,overlay", [({"a": 1}, 5), ([1], "x"), ("x", [1]), (5, {"a": 1}), ([1], {"a": 1})])
def test_a_value_of_another_kind_replaces_the_base(base, overlay):
    assert merge(base, overlay) == overlay


def test_named_lists_merge_by_name_and_append_new_names_once():
    base = [{"name": "trainer", "image": "a", "env": [{"name": "X", "value": "1"}]}]
    overlay = [{"name": "trainer", "env": [{"name": "Y", "value": "2"}]},
               {"name": "sidecar", "image": "s"}, {"name": "sidecar", "args": ["--v"]}]
    assert merge(base, overlay) == [
        {"name": "trainer", "image": "a", "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]},
        {"name": "sidecar", "image": "s", "args": ["--v"]},
    ]


def test_a_null_in_the_template_removes_nothing_of_ours():
    base = {"securityContext": {"runAsNonRoot": True}, "volumes": [{"name": "dshm"}], "x": 1}
    assert merge(base, {"securityContext": None, "volumes": None, "x": None, "nodeName": None}) == base
    assert merge(base, {"securityContext": {"runAsNonRoot": None, "fsGroup": 2}}) == {
        **base, "securityContext": {"runAsNonRoot": True, "fsGroup": 2}}


def test_other_lists_are_appended():
    assert merge([1, 2], [3]) == [1, 2, 3]
    assert merge(["hostname"], ["rename"]) == ["hostname", "rename"]  # strings holding "name"
    assert merge([{"key": "a"}], [{"key": "b"}]) == [{"key": "a"}, {"key": "b"}]


@pytest.mark.parametrize("base,overlay", [
    ({}, {"a": {"b": [1]}}),
    ({"l": [{"name": "x"}]}, {"l": [{"name": "y", "v": {"k": [1]}}]}),
    ({"l": [1]}, {"l": [{"k": [1]}]}),
    ({"a": 1}, {"a": {"b": [1]}}),
])
def test_the_result_shares_nothing_with_the_template(base, overlay):
    before = copy.deepcopy(overlay)
    out = merge(base, overlay)

    def scribble(node):
        if isinstance(node, dict):
            for value in node.values():
                scribble(value)
            node["scribbled"] = True
        elif isinstance(node, list):
            for value in node:
                scribble(value)
            node.append("scribbled")

    scribble(out)
    assert overlay == before, "rendering one pod changed the job's podTemplate"

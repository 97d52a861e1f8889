"""The names the operator gives: its children (and which pods are its own), and the
field paths that every validation error starts with."""

from __future__ import annotations

import pytest

from disttrain.api import schema
from disttrain.api.names import selector, service_name, worker_index, worker_name
from disttrain.api.parse import key_path


@pytest.mark.parametrize("pod,index", [
    ("job-worker-0", 0), ("job-worker-17", 17), ("job-worker-1023", 1023),
    ("job-worker-", None), ("job-worker-01", None), ("job-worker-1a", None), ("job-worker--1", None),
    ("other-worker-1", None), ("job-worker-x-worker-2", None), ("job", None), ("xjob-worker-1", None),
])
def test_worker_index_only_for_names_we_make(pod, index):
    assert worker_index(pod, "job") == index


def test_child_names_round_trip():
    assert worker_name("job", 3) == "job-worker-3" and worker_index(worker_name("a-b", 12), "a-b") == 12
    assert service_name("job") == "job" and selector("job") == "disttrain.dev/job=job"


def test_a_name_of_the_prefix_length_without_the_prefix_is_not_ours():
    assert worker_index("abcdefghijk7", "job") is None  # as long as "job-worker-" + "7"


def test_the_service_is_named_and_placed_like_the_job():
    from disttrain.api import load_job
    from disttrain.render import render_service

    from .helpers import job

    j, _, _ = load_job(job())
    meta = render_service(j)["metadata"]
    assert (meta["name"], meta["namespace"]) == ("demo", "team-a")
    doc = job()
    del doc["metadata"]["namespace"]
    j, _, _ = load_job(doc)
    assert render_service(j)["metadata"]["namespace"] == "default"


def test_field_paths_list_every_documented_field():
    paths = schema.field_paths()
    assert paths[0] == "spec.image"
    assert {"spec.nodes", "spec.trainer.builtin.steps", "spec.env.name", "spec.env.valueFrom",
            "spec.checkpoint.async", "spec.rendezvous.joinTimeoutSeconds", "spec.podTemplate.metadata.labels"} <= set(paths)
    assert "spec.scheduling.tolerations.key" not in paths  # free-form items are not walked
    assert len(paths) == len(set(paths))
    assert schema.field_paths(prefix="x")[0] == "x.image"


@pytest.mark.parametrize("prefix,key,path", [
    ("spec", "nodes", "spec.nodes"), ("", "spec", "spec"), ("", 3, "(document)['3']"),
    ("spec", "a.b", "spec['a.b']"), ("spec", "", "spec['']"), ("spec", "a\nb", "spec['a\\nb']"),
    ("spec", None, "spec['None']"),
])
def test_key_paths(prefix, key, path):
    assert key_path(prefix, key) == path

"""Bad input: every error names the field, the value, what is allowed and the fix."""

from __future__ import annotations

import pytest

from disttrain_operator.api import InvalidSpec, load_job, validate_document

from .helpers import errors_of, job


def test_unknown_field_suggests_the_right_name():
    (message,) = errors_of(job(precison="32"))
    assert message.startswith("spec.precison: is not a known field (got '32')")
    assert "did you mean 'precision'?" in message


def test_enum_value_suggests_the_closest_choice():
    (message,) = errors_of(job(strategy="ddpp"))
    assert message == ("spec.strategy: is not allowed (got 'ddpp'); allowed: auto, ddp, fsdp, "
                       "fsdp_native. Fix: did you mean 'ddp'?")


def test_enum_value_in_the_wrong_case_says_so():
    (message,) = errors_of(job(strategy="DDP"))
    assert "use 'ddp' (values are case-sensitive)" in message


@pytest.mark.parametrize("spec,start", [
    ({"nodes": "2"}, "spec.nodes: must be an integer (got '2'). Fix: drop the quotes: 2"),
    ({"nodes": 0}, "spec.nodes: is out of range (got 0); allowed: >= 1 and <= 1024"),
    ({"gpusPerNode": -1}, "spec.gpusPerNode: is out of range (got -1)"),
    ({"suspend": "yes"}, "spec.suspend: must be true or false (got 'yes')"),
    ({"precision": 32}, "spec.precision: must be a string (got 32). Fix: quote it: \"32\""),
    ({"env": [{"name": "A", "value": 8}]}, "spec.env[0].value: must be a string (got 8). Fix: quote it: \"8\""),
    ({"env": [{"value": "x"}]}, "spec.env[0].name: is required (not set)"),
    ({"trainer": {"builtin": {"learningRate": 0}}}, "spec.trainer.builtin.learningRate: is out of range (got 0); allowed: > 0"),
    ({"checkpoint": {"path": "relative"}}, "spec.checkpoint.path: has an invalid format (got 'relative'); allowed: an absolute path"),
    ({"mesh": {"fsdp": 2}}, "spec.mesh.tp: is required (not set)"),
    ({"gpuResourceName": "nvidia com/gpu"}, "spec.gpuResourceName: has an invalid format"),
    ({"rendezvous": {"port": 70000}}, "spec.rendezvous.port: is out of range (got 70000); allowed: >= 1 and <= 65535"),
    ({"scheduling": {"nodeSelector": {"gpu": True}}}, "spec.scheduling.nodeSelector.gpu: must be a string"),
    ({"resources": []}, "spec.resources: must be a mapping"),
])
def test_type_and_bound_errors(spec, start):
    messages = errors_of(job(**spec))
    assert any(m.startswith(start) for m in messages), messages


def test_duplicate_env_names_are_an_error():
    (message,) = errors_of(job(env=[{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]))
    assert message.startswith("spec.env[1].name: is duplicated (got 'A')")


def test_wrong_api_version_and_kind():
    doc = job()
    doc["apiVersion"], doc["kind"] = "kubeflow.org/v1", "PyTorchJob"
    messages = errors_of(doc)
    assert "apiVersion: is not ours (got 'kubeflow.org/v1'); allowed: disttrain.dev/v1alpha1" in messages[0]
    assert messages[1].startswith("kind: is not ours (got 'PyTorchJob')")


def test_fields_outside_spec_are_reported():
    doc = job()
    doc["nodes"] = 2
    (message,) = errors_of(doc)
    assert message.startswith("nodes: is not a top-level field") and "indent it under spec" in message


def test_missing_name():
    doc = job()
    del doc["metadata"]["name"]
    assert errors_of(doc) == ["metadata.name: is required (not set); allowed: a DNS label. Fix: set metadata.name: my-job"]


def test_not_a_mapping():
    assert errors_of(["a", "list"])[0].startswith("(document): is not a mapping")


def test_every_error_is_collected_not_just_the_first():
    assert len(errors_of(job(nodes=0, strategy="x", precision="64"))) == 3


def test_load_job_raises_only_invalid_spec_with_all_errors():
    with pytest.raises(InvalidSpec) as info:
        load_job(job(nodes=0, strategy="x"))
    assert len(info.value.errors) == 2
    assert "spec.nodes" in str(info.value)


def test_valid_spec_gets_documented_defaults():
    spec = validate_document(job()).job.spec
    assert spec.nodes == 1 and spec.gpus_per_node == 0 and spec.nproc_per_node == "auto"
    assert spec.rendezvous.port == 29400 and spec.rendezvous.backend == "c10d"
    assert spec.checkpoint.path == "/checkpoints" and spec.checkpoint.keep == 3
    assert spec.trainer.builtin.model == "gpt-nano" and spec.trainer.builtin.dataset == "text"
    assert spec.clean_pod_policy == "Running" and spec.backoff_limit == 6
    assert spec.metrics.port == 9400


@pytest.mark.parametrize("spec,start", [
    ({"scheduling": {"affinity": {"nodeAfinity": {}}}},
     "spec.scheduling.affinity.nodeAfinity: is not a known field (got {}); allowed: the Kubernetes v1.37.1 fields "
     "here. Fix: did you mean 'nodeAffinity'?"),
    ({"scheduling": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "in"}]}]}}}}},
     "spec.scheduling.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
     ".matchExpressions[0].operator: is not allowed (got 'in'); allowed: DoesNotExist, Exists, Gt, In, Lt, NotIn. "
     "Fix: use 'In' (values are case-sensitive)"),
    ({"scheduling": {"tolerations": [{"key": "gpu", "effect": "NoSchedul"}]}},
     "spec.scheduling.tolerations[0].effect: is not allowed (got 'NoSchedul')"),
    ({"scheduling": {"tolerations": [{"tolerationSeconds": "60"}]}},
     "spec.scheduling.tolerations[0].tolerationSeconds: must be an integer (got '60')"),
    ({"env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s"}}}]},
     "spec.env[0].valueFrom.secretKeyRef.key: is required (not set)"),
    ({"podTemplate": {"spec": {"containers": [{"image": "x"}]}}},
     "spec.podTemplate.spec.containers[0].name: is required (not set)"),
    ({"podTemplate": {"spec": {"ephemeralContainers": [{"name": "x"}]}}},
     "spec.podTemplate.spec.ephemeralContainers: is not a known field"),
    ({"podTemplate": {"spec": {"volumes": [{"name": "v", "cephfs": {"monitors": ["m"]}}]}}},
     "spec.podTemplate.spec.volumes[0].cephfs: is not a known field"),
    ({"podTemplate": {"spec": {"containers": [{"name": "s", "args": ["x"] * 1025}]}}},
     "spec.podTemplate.spec.containers[0].args: has too many items (got '1025 items'); allowed: at most 1024"),
])
def test_kubernetes_fields_are_checked_offline_like_the_api_server(spec, start):
    messages = errors_of(job(**spec))
    assert any(m.startswith(start) for m in messages), messages

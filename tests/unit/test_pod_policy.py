"""The platform's pod policy: podTemplate settings that leave the sandbox are refused,
naming the field, unless the operator's setting allows them for the job's namespace."""

from __future__ import annotations

import pytest

from disttrain.api import InvalidSpec, load_job, validate_document
from disttrain.api.policy import PodPolicy, check_pod_policy, pod_policy_from_env

from .helpers import job
from .pod_escapes import ESCAPES



def errors(pod_spec: dict, policy: PodPolicy = PodPolicy(), namespace: str = "team-a") -> list[str]:
    doc = job(podTemplate={"spec": pod_spec})
    doc["metadata"]["namespace"] = namespace
    return [str(e) for e in validate_document(doc, policy).errors]


@pytest.mark.parametrize("pod_spec,expected", ESCAPES, ids=[e[1].split(":")[0] for e in ESCAPES])
def test_each_escape_is_refused_by_default_naming_the_field(pod_spec, expected):
    messages = errors(pod_spec)
    assert len(messages) == 1 and messages[0].startswith(expected), messages
    assert "Fix: remove it; if this namespace needs it, the platform team allows it" in messages[0]


@pytest.mark.parametrize("pod_spec,expected", ESCAPES, ids=[e[1].split(":")[0] for e in ESCAPES])
def test_each_escape_is_allowed_where_the_platform_allows_it(pod_spec, expected):
    assert errors(pod_spec, PodPolicy(allow_all=True)) == []
    assert errors(pod_spec, PodPolicy(allowed_namespaces=frozenset({"team-a"}))) == []
    assert errors(pod_spec, PodPolicy(allowed_namespaces=frozenset({"team-b"}))) != []


def test_settings_inside_the_sandbox_pass():
    safe = {"nodeSelector": {"gpu": "a100"}, "priorityClassName": "high",
            "securityContext": {"runAsUser": 2000, "sysctls": [{"name": "net.ipv4.tcp_keepalive_time", "value": "60"}]},
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                        {"name": "cm", "projected": {"sources": [{"configMap": {"name": "c"}}]}}],
            "containers": [{"name": "trainer", "securityContext": {"capabilities": {"add": ["NET_BIND_SERVICE"]},
                                                                   "allowPrivilegeEscalation": False}}]}
    assert errors(safe) == []


def test_a_privileged_trainer_needs_privilege_escalation_too():
    allowed = PodPolicy(allow_all=True)
    (message,) = errors({"containers": [{"name": "trainer", "securityContext": {"privileged": True}}]}, allowed)
    assert message.startswith("spec.podTemplate.spec.containers[0].securityContext.privileged: needs "
                              "allowPrivilegeEscalation: true, which disttrain sets to false")
    assert errors({"containers": [{"name": "trainer", "securityContext": {
        "privileged": True, "allowPrivilegeEscalation": True}}]}, allowed) == []


def test_automount_token_stays_owned_by_disttrain_whatever_the_policy():
    for policy in (PodPolicy(), PodPolicy(allow_all=True)):
        (message,) = errors({"automountServiceAccountToken": True}, policy)
        assert message.startswith("spec.podTemplate.spec.automountServiceAccountToken: is set by disttrain")


def test_policy_from_env():
    assert pod_policy_from_env({}) == PodPolicy()
    assert pod_policy_from_env({"DISTTRAIN_POD_POLICY_ALLOW_ALL": "True"}) == PodPolicy(allow_all=True)
    assert pod_policy_from_env({"DISTTRAIN_POD_POLICY_ALLOW_ALL": " False "}) == PodPolicy()
    assert pod_policy_from_env({"DISTTRAIN_POD_POLICY_ALLOW_NAMESPACES": " a, b ,,"}) == \
        PodPolicy(allowed_namespaces=frozenset({"a", "b"}))
    with pytest.raises(ValueError, match="DISTTRAIN_POD_POLICY_ALLOW_ALL='yes': set it to true or false"):
        pod_policy_from_env({"DISTTRAIN_POD_POLICY_ALLOW_ALL": "yes"})


def test_load_job_applies_the_policy_it_is_given():
    doc = job(podTemplate={"spec": {"hostNetwork": True}})
    with pytest.raises(InvalidSpec, match="hostNetwork: leaves the container sandbox"):
        load_job(doc)
    assert load_job(doc, PodPolicy(allow_all=True))[0].spec.pod_template.spec == {"hostNetwork": True}


def test_the_policy_the_operator_logs_at_start():
    assert PodPolicy().describe() == "refuse"
    assert PodPolicy(allow_all=True, allowed_namespaces=frozenset({"a"})).describe() == "allow-all"
    assert PodPolicy(allowed_namespaces=frozenset({"b", "a"})).describe() == "refuse, except in a, b"


def test_wrong_shapes_in_the_template_do_not_crash_the_policy():
    for junk in ({"volumes": "x"}, {"volumes": [1, None, {"projected": "x"}]}, {"containers": {"a": 1}},
                 {"securityContext": {"capabilities": "ALL"}}, {"initContainers": [{"securityContext": {
                     "capabilities": {"add": [1, None]}}}]}):
        validate_document(job(podTemplate={"spec": junk}))  # errors or not, never an exception
        check_pod_policy(junk, "team-a", PodPolicy())  # the raw template too, as the schema check may stop first
    # sysctls are the pod's (a container's securityContext has none: the schema check names it)
    assert check_pod_policy({"containers": [{"securityContext": {"sysctls": [{"name": "kernel.panic"}]}}]},
                            "team-a", PodPolicy()) == []
    refused = check_pod_policy({"initContainers": [{"securityContext": {"capabilities": {
        "add": [1, "cap_net_bind_service"]}}}]}, "team-a", PodPolicy())
    assert [(e.path, e.value) for e in refused] == [
        ("spec.podTemplate.spec.initContainers[0].securityContext.capabilities.add[0]", 1)]


def annotation_errors(annotations: dict, policy: PodPolicy = PodPolicy()) -> list[str]:
    doc = job(podTemplate={"metadata": {"annotations": annotations}})
    return [str(e) for e in validate_document(doc, policy).errors]


@pytest.mark.parametrize("key,value", [
    ("container.apparmor.security.beta.kubernetes.io/trainer", "unconfined"),
    ("container.apparmor.security.beta.kubernetes.io/log-shipper", "unconfined"),  # a sidecar's
    ("seccomp.security.alpha.kubernetes.io/pod", "unconfined"),
    ("container.seccomp.security.alpha.kubernetes.io/trainer", "unconfined"),
])
def test_the_legacy_apparmor_and_seccomp_annotations_cannot_unconfine_any_container(key, value):
    (message,) = annotation_errors({key: value})
    assert message.startswith(f"spec.podTemplate.metadata.annotations['{key}']: leaves the container sandbox")
    assert annotation_errors({key: value}, PodPolicy(allow_all=True)) == []


def test_confined_profiles_in_annotations_pass():
    assert annotation_errors({"container.apparmor.security.beta.kubernetes.io/trainer": "runtime/default",
                              "container.apparmor.security.beta.kubernetes.io/sidecar": "localhost/k8s-sidecar",
                              "seccomp.security.alpha.kubernetes.io/pod": "runtime/default",
                              "team.example.com/owner": "unconfined"}) == []


@pytest.mark.parametrize("where", ["containers", "initContainers"])  # ephemeralContainers: not a podTemplate field
def test_an_unconfined_apparmor_profile_is_refused_on_every_container(where):
    container = {"name": "log-shipper", "image": "busybox", "restartPolicy": "Always",
                 "securityContext": {"appArmorProfile": {"type": "Unconfined"}}}
    if where != "initContainers":
        container.pop("restartPolicy")
    (message,) = errors({where: [container]})
    assert message.startswith(f"spec.podTemplate.spec.{where}[0].securityContext.appArmorProfile.type: leaves")

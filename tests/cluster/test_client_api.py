"""`from disttrain import Client` against the real API server, with no operator: every
method's answer and every error it promises (docs/cli.md "Python client"), at their edges.
The test writes the job's status itself, as admin, where a method follows it; what the
operator does with a job is tests/cluster/test_cli_commands.py's.

These tests are fast on purpose (no pods, no operator): `hack/mutation.py --cluster` runs
them once per mutant of client.py."""

from __future__ import annotations

import json
import queue
import re
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from disttrain.local.ports import free_port

pytestmark = pytest.mark.cluster

REF = "distributedtraining.disttrain.dev"
RESOURCE = "distributedtrainings.disttrain.dev"


def manifest(name: str, **spec) -> dict:
    return {"apiVersion": "disttrain.dev/v1alpha1", "kind": "DistributedTraining",
            "metadata": {"name": name}, "spec": {"nodes": 1, **spec}}


CRDS = Path(__file__).resolve().parents[2] / "manifests" / "crd"


@pytest.fixture(scope="session")
def crds(cluster) -> None:
    cluster.kubectl("apply", "-f", str(CRDS))
    cluster.wait_established()


@pytest.fixture
def client(cluster, namespace, crds):
    from disttrain import Client

    return Client(namespace, kubeconfig=cluster.kubeconfig)


def test_create_validates_offline_dry_runs_and_refuses_a_name_in_use(cluster, namespace, client):
    from disttrain import DisttrainError, DistributedTrainingSpec, InvalidJob

    with pytest.raises(InvalidJob) as refused:
        client.create(manifest("bad", nodes=0, strategy="nope"))
    assert refused.value.errors and all(e.startswith("spec.") for e in refused.value.errors)
    assert {e.split(":")[0] for e in refused.value.errors} >= {"spec.nodes", "spec.strategy"}
    assert str(refused.value).startswith("error: bad is invalid: spec.")
    assert cluster.try_get("dt", "bad", namespace) is None  # nothing reached the cluster

    dry = client.create(manifest("dry"), dry_run=True)
    assert dry["metadata"]["name"] == "dry" and dry["metadata"]["namespace"] == namespace
    assert cluster.try_get("dt", "dry", namespace) is None

    typed = client.create(DistributedTrainingSpec(nodes=1), name="typed")
    assert (typed["metadata"]["name"], typed["spec"]["nodes"]) == ("typed", 1)
    assert typed["metadata"]["managedFields"][0]["manager"] == "disttrain"
    with pytest.raises(DisttrainError) as taken:
        client.create(manifest("typed"))
    assert str(taken.value) == (f'Error from server (AlreadyExists): {RESOURCE} "typed" already exists')


def test_apply_says_created_configured_or_unchanged_and_owns_only_its_fields(cluster, namespace, client):
    from disttrain import ApplyConflict, InvalidJob

    # (suspended: most of spec may change only then, docs/api.md)
    obj, what = client.apply(manifest("applied", suspend=True, maxRestarts=3))
    assert (what, obj["spec"]["maxRestarts"], obj["metadata"]["namespace"]) == ("created", 3, namespace)
    assert client.apply(manifest("applied", suspend=True, maxRestarts=3))[1] == "unchanged"
    obj, what = client.apply(manifest("applied", suspend=True, maxRestarts=4))
    assert (what, obj["spec"]["maxRestarts"]) == ("configured", 4)
    obj, what = client.apply(manifest("applied", suspend=True, maxRestarts=5), dry_run=True)
    assert (what, obj["spec"]["maxRestarts"]) == ("configured", 5)
    assert client.get("applied")["spec"]["maxRestarts"] == 4  # a dry run stores nothing

    with pytest.raises(InvalidJob) as unnamed:
        client.apply({"metadata": {"generateName": "x-"}, "spec": {"nodes": 1}})
    assert [e.split(":")[0] for e in unnamed.value.errors] == ["metadata.name"]
    # name= names it, over the object's own name, as create() does.
    obj, what = client.apply({"metadata": {"generateName": "x-"}, "spec": {"nodes": 1, "suspend": True}}, name="named")
    assert (what, obj["metadata"]["name"]) == ("created", "named")
    assert client.apply(manifest("applied", suspend=True, maxRestarts=4), name="renamed")[1] == "created"
    assert client.get("applied")["spec"]["maxRestarts"] == 4 and client.get("renamed")["spec"]["maxRestarts"] == 4

    # Over its own create(): the fields are ours, so apply takes them without force.
    client.create(manifest("mine", suspend=True, maxRestarts=1))
    assert client.apply(manifest("mine", suspend=True, maxRestarts=2))[0]["spec"]["maxRestarts"] == 2

    # A field another manager set: a conflict naming it, unless forced.
    other = manifest("shared", suspend=True, maxRestarts=1)
    other["metadata"]["namespace"] = namespace
    cluster.kubectl("apply", "--server-side", "--field-manager=someone-else", "-f", "-", input=json.dumps(other))
    with pytest.raises(ApplyConflict) as conflict:
        client.apply(manifest("shared", suspend=True, maxRestarts=7))
    assert "(Conflict)" in str(conflict.value) and "someone-else" in str(conflict.value)
    assert str(conflict.value).endswith("; --force-conflicts (force=True) takes these fields over")
    assert client.get("shared")["spec"]["maxRestarts"] == 1
    assert client.apply(manifest("shared", suspend=True, maxRestarts=7), force=True)[0]["spec"]["maxRestarts"] == 7


def test_get_list_jobs_and_status_read_the_namespace_given_else_the_clients(cluster, namespace, client):
    from disttrain import Client

    other = f"{namespace}-o"
    cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}})
    try:
        client.create(manifest("a"))
        client.create({**manifest("b"), "metadata": {"name": "b", "labels": {"team": "x"}}})
        client.create(manifest("c"), namespace=other)
        assert [o["metadata"]["name"] for o in client.list()] == ["a", "b"]
        assert [o["metadata"]["name"] for o in client.list(other)] == ["c"]
        assert [o["metadata"]["name"] for o in client.list(selector="team=x")] == ["b"]
        everywhere = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in client.list(all_namespaces=True)}
        assert {(namespace, "a"), (namespace, "b"), (other, "c")} <= everywhere
        assert [v.name for v in client.jobs(selector="team=x")] == ["b"]
        assert [v.name for v in client.jobs(other)] == ["c"]
        assert {v.name for v in client.jobs(all_namespaces=True)} >= {"a", "b", "c"}
        assert client.get("c", other)["metadata"]["namespace"] == other
        cluster.patch_status("dt", "c", {"phase": "Running"}, other)
        assert (client.status("c", other).name, client.status("c", other).phase) == ("c", "Running")
        assert Client(other, kubeconfig=cluster.kubeconfig).get("c")["metadata"]["name"] == "c"
    finally:
        cluster.kubectl("delete", "namespace", other, "--wait=false")


def test_suspend_and_resume_set_spec_suspend_and_nothing_else(cluster, namespace, client):
    client.create(manifest("paused", maxRestarts=2))
    assert client.suspend("paused")["spec"] == {**client.get("paused")["spec"], "suspend": True}
    assert client.get("paused")["spec"]["suspend"] is True and client.get("paused")["spec"]["maxRestarts"] == 2
    assert client.resume("paused")["spec"]["suspend"] is False
    assert client.get("paused")["spec"]["suspend"] is False


def test_delete_and_get_of_a_missing_job_say_not_found_like_kubectl(cluster, namespace, client):
    from disttrain import NotFound

    client.create(manifest("gone"))
    assert client.delete("gone", wait=True, timeout=60) is None
    assert cluster.try_get("dt", "gone", namespace) is None
    for call in (lambda: client.get("gone"), lambda: client.delete("gone"), lambda: client.suspend("gone"),
                 lambda: client.status("gone")):
        with pytest.raises(NotFound) as missing:
            call()
        assert str(missing.value) == f'Error from server (NotFound): {RESOURCE} "gone" not found'
    assert client.wait_for("gone", "delete", timeout=30) is None  # already gone: done at once
    nowhere = f"{namespace}-none"  # a namespace that does not exist: the server says so, not "job not found"
    for call in (lambda: client.create(manifest("gone"), namespace=nowhere),
                 lambda: client.apply(manifest("gone"), namespace=nowhere)):
        with pytest.raises(NotFound) as missing:
            call()
        assert str(missing.value) == f'Error from server (NotFound): namespaces "{nowhere}" not found'


def test_wait_and_watch_follow_the_status_to_the_phase_asked_for(cluster, namespace, client):
    from disttrain import InvalidArgument, JobFailed, WaitTimeout

    client.create(manifest("followed"))
    cluster.patch_status("dt", "followed", {"phase": "Running"}, namespace)
    seen = []
    view = client.wait("followed", ("Running", "Suspended"), timeout=30, on_change=seen.append)
    assert view.phase == "Running" and [v.phase for v in seen] == ["Running"]
    assert client.wait_for("followed", "jsonpath={.status.phase}=Running", timeout=30).phase == "Running"
    with pytest.raises(WaitTimeout) as late:
        client.wait("followed", "Succeeded", timeout=2)
    assert str(late.value) == f"error: timed out waiting for {REF}/followed"
    with pytest.raises(WaitTimeout):
        client.wait_for("followed", "condition=Ready", timeout=2)

    for bad in ("Pending", "Failed"):
        with pytest.raises(InvalidArgument) as wrong:
            client.wait("followed", bad)
        assert str(wrong.value) == (f"phase '{bad}' cannot be waited for; allowed: Running, Succeeded, Suspended")
    with pytest.raises(InvalidArgument) as both:
        client.wait("followed", ("Pending", "Running", "Failed"))
    assert str(both.value).startswith("phase 'Pending', 'Failed' cannot be waited for; ")
    with pytest.raises(InvalidArgument) as none:
        client.wait("followed", ())
    assert str(none.value).startswith("phase (none) cannot be waited for; ")
    with pytest.raises(WaitTimeout):  # a watch with a timeout ends by it when nothing finishes the job
        list(client.watch("followed", timeout=2))

    def write_later(status: dict) -> threading.Thread:
        def write() -> None:
            time.sleep(1)  # (so the wait below is already watching; it passes either way)
            cluster.patch_status("dt", "followed", status, namespace)
        writer = threading.Thread(target=write)
        writer.start()
        return writer

    writer = write_later({"progress": {"step": 40}})
    try:  # met by a change, well inside its timeout
        assert client.wait_for("followed", "jsonpath={.status.progress.step}=40", timeout=60).name == "followed"
    finally:
        writer.join()
    with pytest.raises(InvalidArgument) as target:
        client.wait_for("followed", "jsonpath=")
    assert str(target.value).startswith("error: ")

    stamp = "2026-11-27T00:00:00Z"
    cluster.patch_status("dt", "followed", {"phase": "Failed", "conditions": [
        {"type": "Validated", "status": "True", "reason": "Valid", "message": "ok", "lastTransitionTime": stamp},
        {"type": "Suspended", "status": "False", "reason": "NotSuspended", "message": "no", "lastTransitionTime": stamp},
        {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "worker 0 exited 1",
         "lastTransitionTime": stamp}]}, namespace)
    with pytest.raises(JobFailed) as failed:
        client.wait("followed", timeout=30)
    assert failed.value.view.phase == "Failed"
    assert str(failed.value) == (f"error: {REF}/followed is Failed; it will never be Succeeded: "
                                 "BackoffLimitExceeded: worker 0 exited 1")
    client.create(manifest("done"))
    cluster.patch_status("dt", "done", {"phase": "Succeeded"}, namespace)
    with pytest.raises(JobFailed) as ended:  # no Failed condition: nothing more to say
        client.wait("done", "Running", timeout=30)
    assert str(ended.value) == f"error: {REF}/done is Succeeded; it will never be Running"

    views = list(client.watch("followed", timeout=30))  # a finished job: its view, then the end
    assert [v.phase for v in views] == ["Failed"]


def test_watch_of_a_job_deleted_meanwhile_says_so(cluster, namespace, client):
    from disttrain import NotFound

    client.create(manifest("vanishing"))
    client.create(manifest("bystander"))
    stream = client.watch("vanishing", timeout=60)
    assert next(stream).name == "vanishing"
    cluster.kubectl("label", "dt", "bystander", "-n", namespace, "moved=yes")  # another job's change: not shown
    cluster.kubectl("label", "dt", "vanishing", "-n", namespace, "moved=yes")
    assert next(stream).name == "vanishing"
    cluster.kubectl("delete", "dt", "vanishing", "-n", namespace)
    with pytest.raises(NotFound) as gone:
        list(stream)
    assert str(gone.value) == f'Error from server (NotFound): {RESOURCE} "vanishing" was deleted'


def test_watch_all_lists_syncs_then_streams_only_what_the_filters_match(cluster, namespace, client):
    client.create({**manifest("kept"), "metadata": {"name": "kept", "labels": {"team": "x"}}})
    client.create(manifest("other"))
    client.create(manifest("third"))
    stream = client.watch_all(selector="team=x")
    assert [(kind, obj.get("metadata", {}).get("name")) for kind, obj in (next(stream), next(stream))] == [
        ("ADDED", "kept"), ("SYNCED", None)]
    cluster.kubectl("label", "dt", "other", "-n", namespace, "seen=yes")  # not matched: never streamed
    cluster.kubectl("label", "dt", "kept", "-n", namespace, "seen=yes")
    kind, obj = next(stream)
    assert (kind, obj["metadata"]["name"], obj["metadata"]["labels"]["seen"]) == ("MODIFIED", "kept", "yes")
    cluster.kubectl("delete", "dt", "kept", "-n", namespace)
    assert next(stream)[0] == "DELETED"
    stream.close()
    named = client.watch_all(name="other")
    assert [(k, o.get("metadata", {}).get("name")) for k, o in (next(named), next(named))] == [
        ("ADDED", "other"), ("SYNCED", None)]
    named.close()


def test_events_are_the_jobs_own(cluster, namespace, client):
    client.create(manifest("noted"))
    uid = client.get("noted")["metadata"]["uid"]
    for name, kind, obj in (("e1", "DistributedTraining", "noted"), ("e2", "Pod", "noted"),
                            ("e3", "DistributedTraining", "noted-not")):
        cluster.apply({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name, "namespace": namespace},
                       "involvedObject": {"apiVersion": "disttrain.dev/v1alpha1", "kind": kind, "name": obj,
                                          "namespace": namespace, "uid": uid},
                       "reason": "Tested", "message": name, "type": "Normal"})
    assert [e["message"] for e in client.events("noted")] == ["e1"]
    assert client.events("noted")[0]["involvedObject"]["kind"] == "DistributedTraining"


def test_no_rights_unreachable_and_a_broken_kubeconfig_are_one_line_errors(cluster, namespace, client,
                                                                           tmp_path: Path):
    from disttrain import Client, Forbidden, InvalidArgument, KubeconfigError, Unreachable

    cluster.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "nobody",
                                                                              "namespace": namespace}})
    nobody = Client(namespace, kubeconfig=cluster.kubeconfig_for_service_account(namespace, "nobody"))
    with pytest.raises(Forbidden) as denied:
        nobody.list()
    assert str(denied.value).startswith("Error from server (Forbidden): ")
    assert f"system:serviceaccount:{namespace}:nobody" in str(denied.value) and "\n" not in str(denied.value)

    port = free_port()  # a port nothing listens on
    config = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
    away = tmp_path / "away"
    away.write_text(yaml.safe_dump(config))
    with pytest.raises(Unreachable) as unreachable:
        Client(namespace, kubeconfig=str(away), request_timeout=5).list()
    assert str(unreachable.value).startswith(f"Unable to connect to the server https://127.0.0.1:{port}: ")

    broken = tmp_path / "broken"
    broken.write_text("clusters: [")
    with pytest.raises(KubeconfigError):
        Client(namespace, kubeconfig=str(broken))
    with pytest.raises(InvalidArgument) as negative:
        Client(namespace, kubeconfig=cluster.kubeconfig, request_timeout=-1)
    assert str(negative.value) == "request_timeout -1: give seconds >= 0 (0: no limit)"
    assert Client(namespace, kubeconfig=cluster.kubeconfig, request_timeout=0).list() == []


def test_the_real_servers_404_for_a_group_it_does_not_serve_reads_as_the_missing_crd(cluster, namespace):
    """What kube-apiserver answers for the jobs' path when no CRD of their group is installed
    (its mux's plain-text 404, not a Status) is what the client turns into the install hint;
    tests/unit/test_client.py's stand-in answers the same, for every method."""
    from kubernetes import config as k8s_config
    from kubernetes.client.rest import ApiException

    from disttrain.client import errors

    api = k8s_config.new_client_from_config(config_file=cluster.kubeconfig)
    with pytest.raises(ApiException) as raised:  # a group nothing serves: as disttrain.dev without its CRD
        api.call_api(f"/apis/unserved.disttrain.dev/v1alpha1/namespaces/{namespace}/distributedtrainings", "GET",
                     auth_settings=["BearerToken"], response_types_map={200: "object"})
    answer = raised.value
    assert (answer.status, answer.body) == (404, "404 page not found\n")
    assert str(errors.api_error(answer.status, answer.reason, answer.body)) == (
        'Error from server (NotFound): the server doesn\'t have a resource type "distributedtrainings.disttrain.dev": '
        "install disttrain's CRDs (`disttrain crd | kubectl apply -f -`, or the Helm chart)")
    api.close()


def test_every_method_acts_in_the_namespace_given_else_the_clients(cluster, namespace, client):
    """The namespace argument wins over the client's on every call that takes one. The twins'
    name is this run's own: a watch of every namespace must see only these two, also while
    the same test runs beside it (a mutation run's parallel jobs)."""
    other = f"{namespace}-p"
    twin = f"twin-{uuid.uuid4().hex[:6]}"
    cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}})
    try:
        client.create(manifest("solo", suspend=True))  # in the client's namespace only
        assert client.apply(manifest("solo", suspend=True), namespace=other)[1] == "created"
        client.delete("solo", other, wait=True, timeout=60)
        for where in (namespace, other):  # the same name in both: each call must pick its own
            client.create(manifest(twin, suspend=True, maxRestarts=1), namespace=where)
        assert client.apply(manifest(twin, suspend=True, maxRestarts=2), namespace=other)[1] == "configured"
        assert [cluster.get("dt", twin, ns)["spec"]["maxRestarts"] for ns in (namespace, other)] == [1, 2]
        client.resume(twin, other)
        assert [cluster.get("dt", twin, ns)["spec"]["suspend"] for ns in (namespace, other)] == [True, False]
        client.suspend(twin, other)
        client.resume(twin)
        assert [cluster.get("dt", twin, ns)["spec"]["suspend"] for ns in (namespace, other)] == [False, True]
        stream = client.watch_all(other)
        assert next(stream)[1]["metadata"]["namespace"] == other and next(stream)[0] == "SYNCED"
        for where in (namespace, other):  # a change in the client's namespace first: not this watch's
            cluster.kubectl("label", "dt", twin, "-n", where, f"in={where}")
        kind, changed = next(stream)
        assert (kind, changed["metadata"]["namespace"], changed["metadata"]["labels"]) == (
            "MODIFIED", other, {"in": other})
        stream.close()
        everywhere = client.watch_all(all_namespaces=True, name=twin)
        assert sorted(next(everywhere)[1]["metadata"]["namespace"] for _ in range(2)) == sorted([namespace, other])
        assert next(everywhere)[0] == "SYNCED"
        everywhere.close()
        cluster.patch_status("dt", twin, {"phase": "Suspended"}, other)
        assert client.wait(twin, "Suspended", other, timeout=30).phase == "Suspended"
        client.delete(twin, other, wait=True, timeout=60)
        assert cluster.try_get("dt", twin, other) is None and cluster.try_get("dt", twin, namespace) is not None
    finally:
        cluster.kubectl("delete", "namespace", other, "--wait=false")


def test_delete_with_wait_returns_once_the_job_is_gone_or_times_out(cluster, namespace, client):
    """A finalizer (what a user's controller may hold) keeps the job after the delete: a
    delete returns at once, one with wait waits for it, and a timeout says so."""
    from disttrain import WaitTimeout

    held = manifest("held")
    held["metadata"]["finalizers"] = ["test.disttrain.dev/hold"]
    client.create(held)
    assert client.delete("held") is None  # no wait (the default): back once the server has taken it
    assert cluster.get("dt", "held", namespace)["metadata"]["deletionTimestamp"]
    with pytest.raises(WaitTimeout) as late:
        client.delete("held", wait=True, timeout=2)
    assert str(late.value) == f"error: timed out waiting for {REF}/held"
    assert cluster.get("dt", "held", namespace)["metadata"]["deletionTimestamp"]

    def release() -> None:
        time.sleep(1)  # (so the delete below is already waiting; it passes either way)
        cluster.kubectl("patch", "dt", "held", "-n", namespace, "--type=merge", "-p", '{"metadata":{"finalizers":null}}')

    releaser = threading.Thread(target=release)
    releaser.start()
    try:
        assert client.delete("held", wait=True, timeout=120) is None  # returns only once it is gone
        assert cluster.try_get("dt", "held", namespace) is None
    finally:
        releaser.join()


def test_apply_counts_a_label_or_annotation_change_as_configured(cluster, namespace, client):
    client.apply(manifest("marked", suspend=True))
    labelled = manifest("marked", suspend=True)
    labelled["metadata"]["labels"] = {"team": "a"}
    assert client.apply(labelled)[1] == "configured"
    annotated = {**labelled, "metadata": {**labelled["metadata"], "annotations": {"note": "x"}}}
    assert client.apply(annotated)[1] == "configured"
    assert client.apply(annotated)[1] == "unchanged"


def test_watch_without_a_timeout_follows_each_change_across_reopened_requests(cluster, namespace, client,
                                                                            monkeypatch):
    """A watch with no timeout runs until the job finishes. Each watch request ends after
    WATCH_SECONDS (1 here), the server ending it (the client would give up on one silent
    WATCH_SLACK past that: 2 s here), and the next starts at the last version seen: a job
    that did not change is not shown again, and the change that comes later is."""
    from disttrain.client import client as client_module

    monkeypatch.setattr(client_module, "WATCH_SECONDS", 1)
    monkeypatch.setattr(client_module, "WATCH_SLACK", 2)
    client.create(manifest("open-ended"))
    stream = client.watch("open-ended")
    assert next(stream).step is None

    def next_after_quiet_requests(status: dict):
        """The next view, while several watch requests end and reopen before `status` is written."""
        def write() -> None:
            time.sleep(4)
            cluster.patch_status("dt", "open-ended", status, namespace)

        writer = threading.Thread(target=write)
        writer.start()
        try:
            return next(stream)
        finally:
            writer.join()

    view = next_after_quiet_requests({"phase": "Running", "progress": {"step": 7}})
    assert (view.phase, view.step) == ("Running", 7)
    view = next_after_quiet_requests({"phase": "Succeeded"})  # after a change seen, too
    assert (view.phase, view.step) == ("Succeeded", 7)
    assert list(stream) == []  # a finished job ends the watch


def test_watch_all_reopens_where_it_left_off_without_replaying(cluster, namespace, client, monkeypatch):
    """Each watch request ends after WATCH_SECONDS (shortened to 1 here), the server ending
    it (the client would give up on one silent WATCH_SLACK past that: 2 s here), and the
    next one starts at the last version seen (the list's, then each change's): no job is
    announced twice, no change is lost."""
    from disttrain.client import client as client_module

    monkeypatch.setattr(client_module, "WATCH_SECONDS", 1)
    monkeypatch.setattr(client_module, "WATCH_SLACK", 2)
    client.create(manifest("steady"))
    stream = client.watch_all()
    assert [kind for kind, _ in (next(stream), next(stream))] == ["ADDED", "SYNCED"]

    def label_later(label: str) -> None:  # while the watch waits: several of its requests end and reopen
        time.sleep(5)
        cluster.kubectl("label", "dt", "steady", "-n", namespace, label)

    def change(labels: dict[str, str]) -> tuple[str, dict]:
        """What follows the quiet: the change alone. A RELIST is the client's documented
        answer when the server no longer keeps the version to resume from (a busy cluster's
        churn past its watch cache, as under a mutation run): the list follows, and the
        change is in it or after it; a job announced again without one is a replay."""
        while True:
            kind, obj = next(stream)
            if kind != "RELIST":
                return kind, obj
            listed = list(iter(lambda: next(stream), ("SYNCED", {})))
            assert [(k, o["metadata"]["name"]) for k, o in listed] == [("ADDED", "steady")], listed
            if listed[0][1]["metadata"].get("labels") == labels:
                return "MODIFIED", listed[0][1]

    # The second change: the requests after the first start at the version it left.
    for label, labels in (("after=reopen", {"after": "reopen"}), ("again=yes", {"after": "reopen", "again": "yes"})):
        writer = threading.Thread(target=label_later, args=(label,))
        writer.start()
        try:
            kind, obj = change(labels)
        finally:
            writer.join()
        assert (kind, obj.get("metadata", {}).get("labels")) == ("MODIFIED", labels), (kind, obj)
    stream.close()


def test_train_submits_the_function_as_the_jobs_trainer(cluster, namespace, client):
    from disttrain import InvalidArgument

    def all_reduce(scale: int) -> None:
        import torch.distributed as dist

        dist.init_process_group("gloo")
        print(scale)

    name = client.train(all_reduce, {"scale": 10}, spec={"nodes": 2, "checkpoint": {"storage": "none"}})
    assert name.startswith("all-reduce-")
    stored = client.get(name)
    assert stored["spec"]["nodes"] == 2 and "function" in json.dumps(stored["spec"]["trainer"])
    named = client.train(all_reduce, {"scale": 1}, name="given", namespace=namespace, dry_run=True)
    assert named == "given" and cluster.try_get("dt", "given", namespace) is None
    from disttrain import Client

    elsewhere = Client("default", kubeconfig=cluster.kubeconfig)  # the namespace argument wins over the client's
    landed = elsewhere.train(all_reduce, {"scale": 2}, namespace=namespace, spec={"nodes": 1})
    assert cluster.try_get("dt", landed, namespace) is not None
    with pytest.raises(InvalidArgument) as twice:
        client.train(all_reduce, {"scale": 1}, spec={"trainer": {"builtin": {}}})
    assert str(twice.value) == "spec.trainer: train() sets the trainer to the function; drop it from spec"
    with pytest.raises(InvalidArgument) as unshippable:
        client.train(lambda: None)
    assert str(unshippable.value).startswith("train(): ")


def test_logs_read_every_workers_log_in_time_order_and_each_option_narrows_it(cluster, namespace, client,
                                                                             logged_job):
    """Client.logs through the API server's pods/log, which KWOK answers from each fake
    pod's file (tests/cluster/conftest.py `logged_job`); tests/e2e/test_cli_logs.py reads
    real containers and follows a log to its end, which KWOK never reaches."""
    from disttrain import Client, InvalidArgument, LogLine, NotFound

    lines = list(client.logs("logged"))
    assert [tuple(line) for line in lines] == [(w, text) for w, text, _ in logged_job.lines]  # across workers
    assert [line.time for line in lines] == [stamp for _, _, stamp in logged_job.lines]
    assert all(isinstance(line, LogLine) for line in lines)
    assert list(client.logs("logged", namespace)) == lines  # the namespace given
    assert list(Client("default", kubeconfig=cluster.kubeconfig).logs("logged", namespace)) == lines  # over the client's

    one = [(w, text) for w, text, _ in logged_job.lines if w == 1]
    assert [tuple(line) for line in client.logs("logged", worker=1)] == one
    assert [tuple(line) for line in client.logs("logged", worker=1, tail=1)] == one[-1:]  # of each worker
    assert [line.text for line in client.logs("logged", tail=1)] == ["no INDEX", "w1 step 1 \ufffd", "w0 step 2"]
    assert [line.text for line in client.logs("logged", tail=0)] == []
    recent = [text for _, text, _ in logged_job.ages(newer_than=120)]
    assert [line.text for line in client.logs("logged", since=120)] == recent
    assert [line.text for line in client.logs("logged", since=119.2)] == recent  # whole seconds, rounded up
    assert list(client.logs("logged", since=0.5)) == []  # under a second is allowed: one second, none that new
    assert [line.text for line in client.logs("logged", worker=0, previous=True)] == logged_job.previous

    for since in (0, -5):
        with pytest.raises(InvalidArgument, match=f"since {since}: give seconds > 0"):
            list(client.logs("logged", since=since))
    with pytest.raises(NotFound) as no_worker:
        list(client.logs("logged", worker=2))
    assert str(no_worker.value).startswith(f"error: {REF}/logged has no worker 2 now (pods appear while it runs")
    client.create(manifest("podless"))
    with pytest.raises(NotFound) as podless:
        list(client.logs("podless"))
    assert str(podless.value) == (f"error: {REF}/podless has no worker pods now (pods appear while it runs; "
                                  "cleanPodPolicy may have removed finished ones)")
    with pytest.raises(NotFound) as missing:
        list(client.logs("nowhere"))
    assert str(missing.value) == f'Error from server (NotFound): {RESOURCE} "nowhere" not found'


def test_followed_logs_pass_on_each_workers_lines_as_they_come(cluster, namespace, client, logged_job):
    """follow=True: every worker's log at once, each in its own order, then each line as
    it is written (KWOK never ends a followed log: the reader stops once it has them)."""
    import itertools

    from fake_logs import kubelet_time

    followed = client.logs("logged", follow=True)
    first = [next(followed) for _ in logged_job.lines]
    for worker in (0, 1, None):
        assert [line.text for line in first if line.worker == worker] == [
            text for w, text, _ in logged_job.lines if w == worker]
    with logged_job.files[1].open("a") as log:
        log.write(f"{kubelet_time(datetime.now(timezone.utc))} stdout F w1 later\n")
    assert tuple(next(followed)) == (1, "w1 later")
    followed.close()
    tail = list(itertools.islice(client.logs("logged", follow=True, worker=0, tail=1), 1))
    assert [(line.worker, line.text) for line in tail] == [(0, "w0 step 2")]


def test_following_a_worker_not_yet_on_a_node_waits_for_it(cluster, namespace, client, tmp_path):
    """`logs -f` right after `submit -d`, or a worker waiting for GPUs: the API server
    answers the log of a pod on no node with nothing, as if it had ended. A plain read
    prints nothing; a followed log waits for the worker to be placed."""
    from fake_logs import worker_with_log

    client.create(manifest("late"))
    # Another pod of the namespace, placed, listed before it: only the worker's own place counts.
    cluster.apply([{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a-placed-pod"},
                    "spec": {"nodeName": "kwok-cpu-0", "containers": [{"name": "c", "image": "c"}]}}],
                  namespace=namespace)
    cluster.apply(worker_with_log("late", 0, tmp_path / "late.log", "placed at last", node=None), namespace=namespace)
    assert list(client.logs("late")) == []

    got: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: got.put(next(client.logs("late", follow=True))), daemon=True).start()
    with pytest.raises(queue.Empty):
        got.get(timeout=3)  # still waiting, asking again each second
    cluster.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "late-worker-0"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "kwok-cpu-0"}}))
    assert tuple(got.get(timeout=60)) == (0, "placed at last")


def test_following_a_job_still_starting_waits_for_every_worker_it_wants(cluster, namespace, client, tmp_path):
    """`submit -d` then `logs -f`: the job wants 2 workers and one pod exists so far. The
    followed log takes the lines of each worker as its pod appears, not of the first only."""
    from fake_logs import wait_served, worker_with_log

    (pod0, log0), (pod1, log1) = (worker_with_log("starting", i, tmp_path / f"{i}.log", f"worker {i} here")
                                  for i in (0, 1))
    client.create(manifest("starting", nodes=2, checkpoint={"storage": "none"}))
    cluster.apply([log0, log1, pod0], namespace=namespace)  # KWOK reads both Logs before it serves worker 0's
    wait_served(cluster, namespace, "starting-worker-0")
    got: queue.Queue = queue.Queue()

    def follow() -> None:
        for line in client.logs("starting", follow=True):
            got.put(tuple(line))

    threading.Thread(target=follow, daemon=True).start()
    with pytest.raises(queue.Empty):
        got.get(timeout=3)  # one of two: it waits for the other, asking again each second
    cluster.apply([pod1], namespace=namespace)
    assert sorted([got.get(timeout=60), got.get(timeout=60)]) == [(0, "worker 0 here"), (1, "worker 1 here")]


def test_a_followed_worker_deleted_before_it_is_placed_ends_with_its_not_found(cluster, namespace, client, tmp_path):
    """`logs -f` waiting for a worker the scheduler has not placed, when that pod is
    deleted (its job deleted, say): the log ends with the API server's NotFound for the pod."""
    from disttrain import NotFound
    from fake_logs import worker_with_log

    client.create(manifest("gone"))
    cluster.apply(worker_with_log("gone", 0, tmp_path / "gone.log", "never read", node=None)[:1], namespace=namespace)
    ended: queue.Queue = queue.Queue()

    def follow() -> None:
        try:
            ended.put(list(client.logs("gone", follow=True)))
        except Exception as exc:  # the test reads what it was
            ended.put(exc)

    threading.Thread(target=follow, daemon=True).start()
    with pytest.raises(queue.Empty):
        ended.get(timeout=2)  # waiting for the worker to be placed
    cluster.kubectl("delete", "pod", "-n", namespace, "gone-worker-0", "--grace-period=0", "--force")
    error = ended.get(timeout=60)
    assert isinstance(error, NotFound), error
    assert str(error) == 'Error from server (NotFound): pods "gone-worker-0" not found'


@pytest.mark.parametrize("phase", ["Suspended", "Succeeded"])
def test_following_a_job_that_will_not_start_its_other_workers_reads_those_it_has(cluster, namespace, client,
                                                                                 tmp_path, phase):
    """A suspended or finished job with fewer pods than it wants gets no more: a followed
    log reads the workers that are there instead of waiting for the rest."""
    from fake_logs import wait_served, worker_with_log

    client.create(manifest("short", nodes=2, checkpoint={"storage": "none"}))
    cluster.kubectl("patch", f"{RESOURCE}/short", "-n", namespace, "--subresource=status", "--type=merge",
                    "-p", json.dumps({"status": {"phase": phase}}))
    cluster.apply(worker_with_log("short", 0, tmp_path / "0.log", "the one there"), namespace=namespace)
    wait_served(cluster, namespace, "short-worker-0")
    got: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: got.put(tuple(next(client.logs("short", follow=True)))), daemon=True).start()
    assert got.get(timeout=60) == (0, "the one there")


def followed_in_background(client, name: str) -> queue.Queue:
    """`client.logs(name, follow=True)` on a daemon thread: each line's text as it comes,
    then the exception it ended with, if it did."""
    got: queue.Queue = queue.Queue()

    def follow() -> None:
        try:
            for line in client.logs(name, follow=True):
                got.put(line.text)
        except Exception as exc:  # the test reads what it was
            got.put(exc)

    threading.Thread(target=follow, daemon=True).start()
    return got


@pytest.mark.timeout(300)  # a hang guard, far above the front's HOLD_SECONDS
def test_a_request_the_server_never_answers_ends_at_the_clients_request_timeout(cluster, namespace, client,
                                                                               tmp_path):
    """request_timeout bounds every request logs() makes, not only its first: the job is
    read, then the API server hangs on the list of the job's pods (a plain read), on the
    check whether a followed worker is placed yet, or on a plain read of the log itself.
    Each ends as Unreachable after the client's request_timeout, as kubectl
    --request-timeout does, instead of hanging."""
    from disttrain import Client, Unreachable
    from fake_logs import worker_with_log
    from api_front import api_front

    client.create(manifest("held"))
    cluster.apply(worker_with_log("held", 0, tmp_path / "held.log", "never read", node=None)[:1],
                  namespace=namespace)

    def pods_list(method: str, path: str) -> bool:
        return method == "GET" and path.startswith(f"/api/v1/namespaces/{namespace}/pods?")

    def placement(method: str, path: str) -> bool:
        return pods_list(method, path) and "fieldSelector=metadata.name%3Dheld-worker-0" in path

    def log_read(method: str, path: str) -> bool:
        return method == "GET" and path.startswith(f"/api/v1/namespaces/{namespace}/pods/held-worker-0/log?")

    for hold, follow in ((pods_list, False), (placement, True), (log_read, False)):
        with api_front(cluster, tmp_path, hold=hold) as front:
            slow = Client(namespace, kubeconfig=str(front.kubeconfig), request_timeout=2)
            with pytest.raises(Unreachable) as hung:
                list(slow.logs("held", follow=follow))
            assert len(front.held) == 1 and hold("GET", front.held[0].split(" ", 1)[1]), front.held
            assert re.fullmatch(r"Unable to connect to the server http://127\.0\.0\.1:\d+: "
                                r"read timed out - the server sent no answer in time", str(hung.value)), hung.value


def is_watch(method: str, path: str) -> bool:
    return method == "GET" and "watch=true" in path.lower()  # the client writes watch=True


@pytest.mark.timeout(300)  # a hang guard, far above the front's HOLD_SECONDS
def test_a_wait_whose_watch_the_server_never_answers_ends_past_its_server_side_timeout(cluster, namespace, client,
                                                                                      tmp_path, monkeypatch):
    """A watch takes no request_timeout (it may rightly be quiet for long), but it is bounded:
    the server is asked to end it by the wait's deadline, and one silent WATCH_SLACK past
    that (30 s; 1 here) is Unreachable, as a read timeout, instead of a wait that hangs."""
    from disttrain import Client, Unreachable
    from api_front import api_front
    from disttrain.client import client as client_module

    monkeypatch.setattr(client_module, "WATCH_SLACK", 1)
    client.create(manifest("unanswered"))

    with api_front(cluster, tmp_path, hold=is_watch) as front:
        slow = Client(namespace, kubeconfig=str(front.kubeconfig))
        with pytest.raises(Unreachable) as hung:
            slow.wait("unanswered", "Succeeded", timeout=5)
        assert len(front.held) == 1 and "fieldSelector=metadata.name%3Dunanswered" in front.held[0], front.held
    assert re.fullmatch(r"Unable to connect to the server http://127\.0\.0\.1:\d+: "
                        r"read timed out - the server sent no answer in time", str(hung.value)), hung.value


@pytest.mark.timeout(300)  # a hang guard
def test_a_wait_whose_version_expired_reads_the_job_again_in_its_own_namespace(cluster, namespace, client, tmp_path):
    """A watch told its version is too old (410 Gone: the server has compacted past it)
    reads the job again with a list and goes on from the list's version; in the namespace
    the wait was given, not the client's nor every one (a job of the same name, never
    Suspended, waits in the client's)."""
    from urllib.parse import parse_qs

    from disttrain import Client
    from api_front import api_front

    other = f"{namespace}x"  # after the client's in a list of every namespace ("-" sorts before "/")
    cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}})
    try:
        client.create(manifest("aged", suspend=True), namespace=other)
        client.create(manifest("aged"))  # first in a list of every namespace
        watches = []

        def gone(method: str, path: str):
            if not is_watch(method, path):
                return None
            watches.append(parse_qs(path.split("?", 1)[1]))
            if len(watches) > 1:
                return None
            cluster.patch_status("dt", "aged", {"phase": phase}, other)  # seen only by reading it again
            return 410, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Expired",
                         "message": "too old resource version: 1 (2)", "code": 410}

        with api_front(cluster, tmp_path, answer=gone) as front:
            waiting = Client(namespace, kubeconfig=str(front.kubeconfig))
            phase = "Suspended"
            assert waiting.wait("aged", "Suspended", other, timeout=60).phase == "Suspended"
            assert len(front.answered) == 1, front.answered
            # Watched on from the list's version: a watch from none would replay the job as
            # it is, a change that did not happen.
            watches.clear()
            phase = "Running"
            views = waiting.watch("aged", other, timeout=60)
            assert [next(views).phase, next(views).phase] == ["Suspended", "Running"]
            cluster.patch_status("dt", "aged", {"phase": "Succeeded"}, other)
            assert next(views).phase == "Succeeded"
            assert len(watches) == 2 and watches[1].get("resourceVersion", [""])[0], watches
    finally:
        cluster.kubectl("delete", "namespace", other, "--wait=false")


@pytest.mark.timeout(300)  # a hang guard, far above the front's HOLD_SECONDS
def test_a_watch_of_every_job_the_server_never_answers_ends_past_its_server_side_timeout(cluster, namespace, client,
                                                                                        tmp_path, monkeypatch):
    """watch_all (`get -w`, `top`) never ends by itself, but each of its requests asks the
    server to end it after WATCH_SECONDS (1 here) and to send bookmarks (so that a quiet
    watch resumes from a version the server still keeps); one silent WATCH_SLACK past that
    (1 here) is Unreachable, as a read timeout, instead of a watch that hangs."""
    from urllib.parse import parse_qs

    from disttrain import Client, Unreachable
    from api_front import api_front
    from disttrain.client import client as client_module

    monkeypatch.setattr(client_module, "WATCH_SECONDS", 1)
    monkeypatch.setattr(client_module, "WATCH_SLACK", 1)
    client.create(manifest("unanswered"))
    with api_front(cluster, tmp_path, hold=is_watch) as front:
        stream = Client(namespace, kubeconfig=str(front.kubeconfig)).watch_all()
        assert [kind for kind, _ in (next(stream), next(stream))] == ["ADDED", "SYNCED"]
        with pytest.raises(Unreachable) as hung:
            next(stream)
        assert len(front.held) == 1, front.held
        asked = parse_qs(front.held[0].split("?", 1)[1])
    assert (asked["timeoutSeconds"], asked["allowWatchBookmarks"]) == (["1"], ["True"]), front.held
    assert str(hung.value).endswith(": read timed out - the server sent no answer in time"), hung.value


@pytest.mark.timeout(300)  # a hang guard
def test_following_a_worker_whose_container_is_still_being_created_waits_for_it(cluster, namespace, client,
                                                                                tmp_path):
    """`logs -f` right after a worker is placed: until its container starts, the kubelet
    answers the log with BadRequest "... is waiting to start: ContainerCreating". A followed
    log asks again each second and then reads the log; a plain read says so at once.
    KWOK starts every container at once, so the front answers the first two log requests
    as the kubelet would (a stand-in for that one state); the rest is the real API server."""
    from api_front import api_front
    from disttrain import Client, DisttrainError
    from fake_logs import wait_served, worker_with_log

    client.create(manifest("creating"))
    cluster.apply(worker_with_log("creating", 0, tmp_path / "c.log", "started at last"), namespace=namespace)
    wait_served(cluster, namespace, "creating-worker-0")
    waiting = (f'container "trainer" in pod "creating-worker-0" is waiting to start: ContainerCreating')
    refusals = {"left": 2}

    def kubelet_while_creating(method: str, path: str):
        if not path.startswith(f"/api/v1/namespaces/{namespace}/pods/creating-worker-0/log?") or not refusals["left"]:
            return None
        refusals["left"] -= 1
        return 400, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": waiting,
                     "reason": "BadRequest", "code": 400}

    with api_front(cluster, tmp_path, answer=kubelet_while_creating) as front:
        steered = Client(namespace, kubeconfig=str(front.kubeconfig))
        followed = steered.logs("creating", follow=True)
        assert tuple(next(followed)) == (0, "started at last")
        followed.close()
        assert len(front.answered) == 2 and all("follow=True" in a for a in front.answered), front.answered
        refusals["left"] = 1
        with pytest.raises(DisttrainError) as plain:
            list(steered.logs("creating"))
        assert str(plain.value) == f"Error from server (BadRequest): {waiting}"
        assert len(front.answered) == 3


def test_lines_of_the_same_time_read_in_worker_index_order_past_the_tenth_worker(cluster, namespace, client,
                                                                                tmp_path):
    """Eleven workers log a line at the same instant: the lines read in worker order 0..10,
    not in pod-name order (worker-10 before worker-2), which the API server lists them in."""
    from fake_logs import wait_served, worker_with_log

    at = datetime.now(timezone.utc)
    client.create(manifest("wide", nodes=11, checkpoint={"storage": "none"}))
    for i in range(11):
        cluster.apply(worker_with_log("wide", i, tmp_path / f"{i}.log", f"worker {i} ready", at=at),
                      namespace=namespace)
    for i in range(11):
        wait_served(cluster, namespace, f"wide-worker-{i}")
    assert [line.worker for line in client.logs("wide")] == list(range(11))


def test_a_followed_log_quiet_for_longer_than_the_request_timeout_goes_on(cluster, namespace, client, tmp_path):
    """docs/cli.md: `logs -f` is not bounded by the request timeout. A worker that prints
    nothing for longer than it (a checkpoint being written, a slow step) is still followed."""
    from api_front import api_front
    from disttrain import Client
    from fake_logs import kubelet_time, wait_served, worker_with_log

    client.create(manifest("quiet"))
    log = tmp_path / "quiet.log"
    cluster.apply(worker_with_log("quiet", 0, log, "before the pause"), namespace=namespace)
    wait_served(cluster, namespace, "quiet-worker-0")
    with api_front(cluster, tmp_path) as front:
        got = followed_in_background(Client(namespace, kubeconfig=str(front.kubeconfig), request_timeout=1), "quiet")
        assert got.get(timeout=60) == "before the pause"
        time.sleep(3)  # quiet for three request timeouts
        with log.open("a") as f:
            f.write(f"{kubelet_time(datetime.now(timezone.utc))} stdout F after the pause\n")
        assert got.get(timeout=60) == "after the pause"


@pytest.mark.timeout(300)  # a hang guard
def test_a_log_that_breaks_off_mid_answer_is_one_line_error(cluster, namespace, client, tmp_path):
    """The server stops in the middle of a log (a plain read: after the request timeout),
    or the connection breaks under a followed log after its first lines: `logs` ends with
    Unreachable in words, as every other request does, not urllib3's exception."""
    from api_front import api_front
    from disttrain import Unreachable
    from fake_logs import wait_served, worker_with_log

    client.create(manifest("broken"))
    cluster.apply(worker_with_log("broken", 0, tmp_path / "b.log", "first words"), namespace=namespace)
    wait_served(cluster, namespace, "broken-worker-0")

    def the_log(method: str, path: str) -> bool:
        return path.startswith(f"/api/v1/namespaces/{namespace}/pods/broken-worker-0/log?")

    with api_front(cluster, tmp_path, cut=the_log, hold_seconds=4) as front:
        from disttrain import Client

        steered = Client(namespace, kubeconfig=str(front.kubeconfig), request_timeout=2)
        with pytest.raises(Unreachable) as plain:
            list(steered.logs("broken"))
        assert re.fullmatch(r"Unable to connect to the server http://127\.0\.0\.1:\d+: "
                            r"read timed out - the server sent no answer in time", str(plain.value)), plain.value
        got = followed_in_background(steered, "broken")
        assert got.get(timeout=60) == "first words"
        broke = got.get(timeout=60)
        assert isinstance(broke, Unreachable) and str(broke).endswith(
            ": the connection broke off in the middle of the answer"), repr(broke)
        assert len(front.cut) == 2

"""Training templates in a cluster (docs/platform.md): jobs resolved against a
ClusterTrainingTemplate and a namespace's TrainingTemplate by the operator, with the RBAC
of each install mode; an enforced setting refused; a template edited while a job runs
(the job keeps what it was resolved against, a new job gets the new generation); a
template deleted (said on the job that keeps it); a namespace's default template; a job
naming a template that does not exist yet, started once it does."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from unit.helpers import package_paths

from .conftest import condition, dump, events_of, get_job, job_manifest, pods_of, wait_job, wait_phase

pytestmark = pytest.mark.cluster


def cluster_template(name: str, defaults: dict | None = None, enforced: dict | None = None) -> dict:
    return {"apiVersion": "disttrain.dev/v1alpha1", "kind": "ClusterTrainingTemplate", "metadata": {"name": name},
            "spec": {"contact": "#ml-platform", "defaults": defaults or {}, "enforced": enforced or {}}}


def team_template(name: str, defaults: dict) -> dict:
    return {"apiVersion": "disttrain.dev/v1alpha1", "kind": "TrainingTemplate", "metadata": {"name": name},
            "spec": {"defaults": defaults}}


def env_of(pod: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0].get("env") or []}


def workers(cluster, namespace: str, job: str, count: int = 1) -> list[dict]:
    return cluster.wait_for(lambda: (lambda pods: pods if len(pods) == count else None)(pods_of(cluster, namespace, job)),
                            timeout=60, what=f"{count} workers of {job}",
                            describe=lambda: dump((cluster.try_get("dt", job, namespace) or {}).get("status")))


def test_jobs_resolve_against_cluster_and_namespace_templates_and_keep_what_they_resolved(
        cluster, namespace, operator):
    shared = f"{namespace}-shared"[:63]
    # maxRestarts and backoffLimit have defaults (the operator's, not the API server's: a
    # stored spec holds what its writer set), and the template's default and enforced value win.
    cluster.apply(cluster_template(shared, defaults={"env": [{"name": "STAGE", "value": "one"}], "maxRestarts": 1},
                                   enforced={"podTemplate": {"metadata": {"labels": {"team": "vision"}}},
                                             "backoffLimit": 2}))
    cluster.apply(team_template("team", {"resources": {"requests": {"cpu": "250m"}}}), namespace=namespace)
    try:
        cluster.apply(job_manifest("first", nodes=1, templateRef={"name": shared}), namespace=namespace)
        cluster.apply(job_manifest("local", nodes=1, templateRef={"kind": "TrainingTemplate", "name": "team"}),
                      namespace=namespace)
        (pod,) = workers(cluster, namespace, "first")
        assert env_of(pod)["STAGE"] == "one" and pod["metadata"]["labels"]["team"] == "vision"
        assert env_of(pod)["PET_MAX_RESTARTS"] == "1"
        assert "maxRestarts" not in get_job(cluster, namespace, "first")["spec"]  # nothing filled in as stored
        first = wait_phase(cluster, namespace, "first", "Running")
        kept = first["status"]["template"]
        made = cluster.get("clustertrainingtemplate", shared)
        assert {k: kept.get(k) for k in ("kind", "name", "uid", "generation", "contact")} == {
            "kind": "ClusterTrainingTemplate", "name": shared, "uid": made["metadata"]["uid"],
            "generation": made["metadata"]["generation"], "contact": "#ml-platform"}
        assert kept["enforced"] == {"podTemplate": {"metadata": {"labels": {"team": "vision"}}}, "backoffLimit": 2}
        assert any(e["reason"] == "TemplateResolved" for e in events_of(cluster, namespace, "first"))
        (local,) = workers(cluster, namespace, "local")
        assert local["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "250m"

        # An enforced setting the job sets otherwise: refused, naming the template and whom to ask.
        cluster.apply(job_manifest("other", nodes=1, templateRef={"name": shared},
                                   podTemplate={"metadata": {"labels": {"team": "speech"}}}), namespace=namespace)
        refused = wait_phase(cluster, namespace, "other", "Failed")
        said = condition(refused, "Validated")
        assert said["reason"] == "InvalidSpec" and (
            f"spec.podTemplate.metadata.labels.team: is enforced by ClusterTrainingTemplate {shared} (got 'speech')"
            in said["message"]) and "ask #ml-platform" in said["message"], said
        assert pods_of(cluster, namespace, "other") == []

        # The template edited while the job runs: the job keeps what it resolved, a new one takes the edit.
        cluster.apply(cluster_template(shared, defaults={"env": [{"name": "STAGE", "value": "two"}], "maxRestarts": 1},
                                       enforced={"podTemplate": {"metadata": {"labels": {"team": "vision"}}},
                                                 "backoffLimit": 2}))
        edited = cluster.get("clustertrainingtemplate", shared)["metadata"]["generation"]
        assert edited > kept["generation"]
        cluster.apply(job_manifest("second", nodes=1, templateRef={"name": shared}), namespace=namespace)
        (fresh,) = workers(cluster, namespace, "second")
        assert env_of(fresh)["STAGE"] == "two"
        second = wait_job(cluster, namespace, "second", lambda j: (j["status"].get("template") or {}).get("generation"),
                          what="second's template recorded")
        assert second["status"]["template"]["generation"] == edited
        assert get_job(cluster, namespace, "first")["status"]["template"] == kept
        (still,) = pods_of(cluster, namespace, "first")
        assert still["metadata"]["uid"] == pod["metadata"]["uid"] and env_of(still)["STAGE"] == "one"

        # Deleted: the jobs that keep it are told, and run on; a new job naming it is refused.
        cluster.kubectl("delete", "clustertrainingtemplate", shared)
        cluster.wait_for(lambda: any(e["reason"] == "TemplateDeleted" for e in events_of(cluster, namespace, "first")),
                         timeout=30, what="the deletion said on the job")
        assert get_job(cluster, namespace, "first")["status"]["phase"] == "Running"
        assert pods_of(cluster, namespace, "first")[0]["metadata"]["uid"] == pod["metadata"]["uid"]
    finally:
        cluster.kubectl("delete", "clustertrainingtemplate", shared, "--ignore-not-found", check=False)


def test_a_namespace_default_and_a_template_that_comes_later(cluster, namespace, operator):
    later = f"{namespace}-later"[:63]
    cluster.apply(team_template("default", {"env": [{"name": "DEFAULTED", "value": "yes"}]}), namespace=namespace)
    try:
        cluster.apply(job_manifest("plain", nodes=1), namespace=namespace)
        (pod,) = workers(cluster, namespace, "plain")
        assert env_of(pod)["DEFAULTED"] == "yes"
        job = wait_job(cluster, namespace, "plain", lambda j: j["status"].get("template"), what="its template kept")
        assert (job["status"]["template"]["kind"], job["status"]["template"]["name"]) == ("TrainingTemplate", "default")

        # A job that comes before its template waits for it, Pending (not Failed), and the
        # CLI's wait for Running waits with it instead of giving up.
        cluster.apply(job_manifest("early", nodes=1, templateRef={"name": later}), namespace=namespace)
        said = wait_job(cluster, namespace, "early", lambda j: condition(j, "Running"), what="why early waits")
        assert said["status"]["phase"] == "Pending" and condition(said, "Failed") is None, dump(said["status"])
        waits = condition(said, "Running")
        assert (waits["status"], waits["reason"]) == ("False", "TemplateNotFound") and \
            f"spec.templateRef.name: names no ClusterTrainingTemplate (got '{later}')" in waits["message"]
        wait = [sys.executable, "-m", "disttrain.cli", "wait", "early", "-n", namespace, "--for", "Running"]
        env = {**os.environ, "KUBECONFIG": cluster.kubeconfig, "PYTHONPATH": package_paths()}
        short = subprocess.run([*wait, "--timeout", "3s"], capture_output=True, text=True, env=env, timeout=60)
        assert (short.returncode, short.stderr) == (
            124, "error: timed out waiting for distributedtraining.disttrain.dev/early\n"), short  # not "never"
        follower = subprocess.Popen([*wait, "--timeout", "2m"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, env=env)
        try:
            cluster.apply(cluster_template(later, defaults={"env": [{"name": "LATE", "value": "1"}]}))
            (started,) = workers(cluster, namespace, "early")
            assert env_of(started)["LATE"] == "1"
            wait_phase(cluster, namespace, "early", "Running")
            out, _ = follower.communicate(timeout=60)
        finally:
            follower.kill()
        assert (follower.returncode, out) == (0, "distributedtraining.disttrain.dev/early is Running\n")
    finally:
        cluster.kubectl("delete", "clustertrainingtemplate", later, "--ignore-not-found", check=False)

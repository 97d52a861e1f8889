"""Training on the real node through the chart-installed operator: the user's scenarios.

Each test applies a job in its own namespace and asserts what the user sees on the
DistributedTraining object. The outcomes the issue requires (the final step equals the
configured steps; a graceful delete is a disruption, never an early success) depend on the
operator/trainer success contract (docs/pod-contract.md).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .conftest import (EXAMPLE, NODE, REPO, example_job, job, job_story, phase, shared_checkpoints,
                       wait_job, worker_pods)

GUIDE = REPO / "docs" / "guide.md"

pytestmark = [pytest.mark.slow]


def running_workers(cluster, namespace: str, name: str, count: int) -> list[dict]:
    def all_running():
        pods = [p for p in worker_pods(cluster, namespace, name) if p["status"].get("phase") == "Running"
                and not p["metadata"].get("deletionTimestamp")]
        return pods if len(pods) == count else None
    return cluster.wait_for(all_running, timeout=300, interval=1, what=f"{count} running workers of {name}")


def exec_in(cluster, namespace: str, pod: str, *cmd: str):
    return cluster.kubectl("exec", "-n", namespace, pod, "-c", "trainer", "--", *cmd, check=False, timeout=60)


def test_cpu_example_trains_to_succeeded_as_shipped(node_cluster, chart_operator, ns, prometheus):
    """kubectl apply -f the example: two pods from our trainer image, rendezvous through the headless
    Service's DNS names, Succeeded with the final step and checkpoint in status; the pods run as
    shipped (non-root, read-only root, no token) and Prometheus scrapes their /metrics."""
    shared_checkpoints(node_cluster, ns, claim="cpu-ddp-checkpoints")  # the claim the example names
    node_cluster.kubectl("apply", "-n", ns, "-f", str(EXAMPLE))
    pods = running_workers(node_cluster, ns, "cpu-ddp", 2)
    assert {p["spec"]["nodeName"] for p in pods} == {NODE}
    pod = pods[0]["metadata"]["name"]
    assert exec_in(node_cluster, ns, pod, "id", "-u").stdout.strip() == "1000"
    touch = exec_in(node_cluster, ns, pod, "touch", "/probe")
    assert touch.returncode != 0 and "Read-only file system" in touch.stderr + touch.stdout
    token = exec_in(node_cluster, ns, pod, "ls", "/var/run/secrets/kubernetes.io/serviceaccount")
    assert token.returncode != 0
    caps = exec_in(node_cluster, ns, pod, "grep", "CapEff", "/proc/self/status").stdout
    assert caps.split()[-1] == "0000000000000000"

    def trainer_series():
        return prometheus.query(f'disttrain_train_step{{namespace="{ns}", job="cpu-ddp"}}')
    series = node_cluster.wait_for(trainer_series, timeout=180, interval=1,
                                   what="Prometheus to scrape the trainer pods' /metrics")
    # the labels the dashboards group by
    assert {"namespace", "job", "pod"} <= set(series[0]["metric"]), series[0]["metric"]

    done = wait_job(node_cluster, ns, "cpu-ddp", "Succeeded", lambda o: phase(o) in ("Succeeded", "Failed"))
    status = done["status"]
    assert phase(done) == "Succeeded", json.dumps(status, indent=1)
    assert status["progress"]["step"] == 60, status["progress"]
    assert status["checkpoint"]["step"] == 60, status["checkpoint"]


def test_a_ten_line_job_trains_against_a_shipped_template(node_cluster, chart_operator, ns):
    """manifests/examples/cpu-from-template.yaml, the CPU example in ten lines, names the
    chart's example template `cpu` (what templates.examples installs): the operator
    resolves it, the workers run with the template's settings, and it trains to Succeeded."""
    template = REPO / "charts" / "disttrain" / "examples" / "templates" / "cpu.yaml"
    node_cluster.kubectl("apply", "-f", str(template))
    try:
        shared_checkpoints(node_cluster, ns, claim="cpu-ddp-checkpoints")
        node_cluster.kubectl("apply", "-n", ns, "-f", str(REPO / "manifests" / "examples" / "cpu-from-template.yaml"))
        done = wait_job(node_cluster, ns, "cpu-from-template", "Succeeded",
                        lambda o: phase(o) in ("Succeeded", "Failed"))
        status = done["status"]
        assert phase(done) == "Succeeded", json.dumps(status, indent=1)
        assert status["progress"]["step"] == 60 and status["resolved"]["strategy"] == "ddp", status
        assert (status["template"]["name"], status["template"]["enforced"]) == ("cpu", {"gpusPerNode": 0})
        pod = worker_pods(node_cluster, ns, "cpu-from-template")[0]
        container = pod["spec"]["containers"][0]
        assert container["resources"]["requests"] == {"cpu": "500m", "memory": "2Gi"}
        assert {"name": "OMP_NUM_THREADS", "value": "1"} in container["env"]
    finally:
        node_cluster.kubectl("delete", "-f", str(template), "--ignore-not-found", check=False)


def long_job(cluster, namespace: str, name: str, steps: int) -> None:
    """The example with `steps`, a checkpoint every 10 steps on a shared claim, one thread a rank."""
    claim = shared_checkpoints(cluster, namespace)
    cluster.apply({**example_job(trainer={"builtin": {"model": "gpt-nano", "dataset": "text", "steps": steps,
                                                      "batchSize": 8, "learningRate": 0.001}},
                                 checkpoint={"claimName": claim, "intervalSteps": 10},
                                 env=[{"name": "OMP_NUM_THREADS", "value": "1"}]),
                   "metadata": {"name": name}}, namespace=namespace)


def wait_checkpoint(cluster, namespace: str, name: str, at_least: int) -> dict:
    return wait_job(cluster, namespace, name, f"a checkpoint at step >= {at_least}",
                    lambda o: (o.get("status", {}).get("checkpoint") or {}).get("step", 0) >= at_least)


def finish_exactly(cluster, namespace: str, name: str, steps: int, stall: float = 240) -> dict:
    """Wait for the job to end at exactly `steps`, failing only when it stops moving for
    `stall` seconds (Cluster.wait_job): a busy machine only makes it slower."""
    done = wait_job(cluster, namespace, name, "Succeeded or Failed", lambda o: phase(o) in ("Succeeded", "Failed"),
                    stall=stall)
    assert phase(done) == "Succeeded", json.dumps(done["status"], indent=1)
    assert done["status"]["progress"]["step"] == steps, done["status"]["progress"]
    return done


def resume_from(cluster, namespace: str, name: str, step: int, said: str = "resuming at step {step}") -> None:
    """`disttrain resume NAME`: both workers run again, and worker 0's trainer says it
    resumes at exactly `step` (the built-in trainer and docs/training-api.md's loop both
    print "resuming at step N"; the Transformers script names its checkpoint folder)."""
    words = re.compile(re.escape(said.format(step=step)) + r"\b")
    env = {**cluster.env, "PYTHONPATH": str(REPO / "operator")}
    resumed = subprocess.run([sys.executable, "-m", "disttrain.cli", "resume", name, "-n", namespace],
                             capture_output=True, text=True, env=env, timeout=60)
    assert resumed.returncode == 0, resumed.stderr
    running_workers(cluster, namespace, name, 2)
    first = said.split("{", 1)[0]
    log = cluster.wait_for(
        lambda: first in (out := cluster.kubectl("logs", "-n", namespace, f"{name}-worker-0",
                                                 check=False).stdout) and out,
        timeout=300, interval=2, what=f"the resumed {name} to load its checkpoint")
    assert words.search(log), log[-3000:]


def test_a_hung_rank_is_detected_restarted_and_the_job_finishes_exactly(node_cluster, chart_operator, ns):
    """Rank 1 stops inside step 25 (the trainer's test hook, docs/trainer.md): rank 0 blocks
    in the step's all-reduce, every pod stays Running, and /status stops moving. After
    failurePolicy.hangSeconds the operator restarts every worker (Hung, one restart), the
    trainer resumes from its step-20 checkpoint, and the job ends at exactly its steps."""
    steps = 120
    claim = shared_checkpoints(node_cluster, ns)
    node_cluster.apply({**example_job(trainer={"builtin": {"model": "gpt-nano", "dataset": "text", "steps": steps,
                                                           "batchSize": 8, "learningRate": 0.001}},
                                      checkpoint={"claimName": claim, "intervalSteps": 10},
                                      # Above what the last step's save and evaluation take on a
                                      # loaded machine (20 s once read a slow final save as a hang).
                                      failurePolicy={"hangSeconds": 60},
                                      env=[{"name": "OMP_NUM_THREADS", "value": "1"},
                                           {"name": "DT_TEST_HANG_AT_STEP", "value": "25"},
                                           {"name": "DT_TEST_HANG_RANK", "value": "1"}]),
                        "metadata": {"name": "stuck"}}, namespace=ns)
    hung = wait_job(node_cluster, ns, "stuck", "the hang detected",
                    lambda o: any(f.get("cause") == "Hung" for f in o.get("status", {}).get("failures") or []))
    entry = next(f for f in hung["status"]["failures"] if f["cause"] == "Hung")
    assert entry["message"].startswith("no step completed for ") and "step 24 since" in entry["message"], entry
    assert (entry["resumedFromStep"], entry["stepsLost"]) == (20, 4), entry
    done = finish_exactly(node_cluster, ns, "stuck", steps)
    assert [f["cause"] for f in done["status"]["failures"]] == ["Hung"], done["status"]["failures"]
    assert done["status"]["restarts"] == 1, done["status"]


def test_force_killed_rendezvous_host_still_finishes_exactly(node_cluster, chart_operator, ns):
    steps = 300
    long_job(node_cluster, ns, "host-killed", steps)
    running_workers(node_cluster, ns, "host-killed", 2)
    wait_checkpoint(node_cluster, ns, "host-killed", 10)
    before = node_cluster.get("pod", "host-killed-worker-0", ns)["metadata"]["uid"]
    node_cluster.kubectl("delete", "pod", "-n", ns, "host-killed-worker-0", "--grace-period=0", "--force")
    done = finish_exactly(node_cluster, ns, "host-killed", steps)
    # The cascade (worker 1 loses the store and exits 1) is one restart (docs/trainer.md),
    # from a checkpoint: nothing before step 10 is trained twice.
    assert done["status"].get("restarts", 0) <= 1, done["status"]
    assert all(f.get("resumedFromStep", 10) >= 10 for f in done["status"].get("failures") or []), done["status"]
    assert node_cluster.get("pod", "host-killed-worker-0", ns)["metadata"]["uid"] != before


def test_suspend_checkpoints_first_loses_no_step_and_resume_finishes_exactly(node_cluster, chart_operator, ns):
    """`kubectl disttrain suspend` mid-run: the operator asks the trainer for a checkpoint
    (POST /checkpoint with the pod's token), every rank saves the current step and holds,
    and only then are the pods deleted: status.eviction says Checkpointed, 0 steps lost and
    the step it resumes from; `resume` loads exactly that checkpoint and the job finishes at
    exactly its steps. Deleting the job then takes every child with it."""
    steps = 300
    long_job(node_cluster, ns, "paused", steps)
    running_workers(node_cluster, ns, "paused", 2)
    wait_job(node_cluster, ns, "paused", "step 15 reported",
             lambda o: (o.get("status", {}).get("progress") or {}).get("step", 0) >= 15)
    env = {**node_cluster.env, "PYTHONPATH": str(REPO / "operator")}
    cli = [sys.executable, "-m", "disttrain.cli"]
    said = subprocess.run([*cli, "suspend", "paused", "-n", ns], capture_output=True, text=True, env=env, timeout=60)
    assert said.returncode == 0 and "checkpoints its current step" in said.stdout, said.stderr
    stopped = wait_job(node_cluster, ns, "paused", "Suspended", lambda o: phase(o) == "Suspended", stall=300)
    ev = stopped["status"]["eviction"]
    assert (ev["reason"], ev["handshake"], ev["stepsLost"]) == ("Suspended", "Checkpointed", 0), ev
    assert ev["resumeFromStep"] >= ev["step"] >= 15, ev
    node_cluster.wait_for(lambda: not worker_pods(node_cluster, ns, "paused"), timeout=300,
                          what="the suspended job's pods to go")
    settled = node_cluster.get("dt", "paused", ns)["status"]
    # The pods' final reports agree: no rank trained past the checkpoint before SIGTERM.
    assert settled["eviction"]["stepsLost"] == 0 and settled["checkpoint"]["step"] == ev["resumeFromStep"], settled
    shown = subprocess.run([*cli, "status", "paused", "-n", ns], capture_output=True, text=True, env=env, timeout=60)
    assert (f"Last stop:   Suspended: checkpointed step {ev['step']} before the pods went, resumes from step "
            f"{ev['resumeFromStep']}, 0 steps lost") in shown.stdout, shown.stdout
    resume_from(node_cluster, ns, "paused", ev["resumeFromStep"])
    finish_exactly(node_cluster, ns, "paused", steps)
    node_cluster.kubectl("delete", "dt", "paused", "-n", ns, "--timeout=240s", timeout=260)
    node_cluster.wait_for(
        lambda: not worker_pods(node_cluster, ns, "paused")
        and node_cluster.try_get("service", "paused", ns) is None,
        timeout=240, what="every child of the deleted job to go")


def suspended_mid_run_and_resumed_exactly(cluster, namespace: str, name: str, example: Path,
                                          said: str = "resuming at step {step}") -> dict:
    """Apply an example of a script of the user's as shipped; once it reports step 100 with
    its step time, `status` shows an ETA; `suspend` ends with the script's own checkpoint of
    the current step (Checkpointed, 0 steps lost); `resume` loads exactly that one and the
    job finishes at exactly its steps. Returns the job as it was while it ran."""
    steps = int(yaml.safe_load(example.read_text())["spec"]["trainer"]["args"][1])
    cluster.kubectl("apply", "-n", namespace, "-f", str(example))
    running = wait_job(cluster, namespace, name, "step 100 reported with its step time",
                       lambda o: (o.get("status", {}).get("progress") or {}).get("stepSeconds")
                       and o["status"]["progress"].get("step", 0) >= 100)
    progress = running["status"]["progress"]
    assert progress["totalSteps"] == steps and progress["loss"] is not None, progress
    env = {**cluster.env, "PYTHONPATH": str(REPO / "operator")}
    cli = [sys.executable, "-m", "disttrain.cli"]
    shown = subprocess.run([*cli, "status", name, "-n", namespace], capture_output=True, text=True, env=env,
                           timeout=60)
    assert re.search(r"^ETA: +\d", shown.stdout, re.M), shown.stdout
    stop = subprocess.run([*cli, "suspend", name, "-n", namespace], capture_output=True, text=True, env=env,
                          timeout=60)
    assert stop.returncode == 0, stop.stderr
    stopped = wait_job(cluster, namespace, name, "Suspended", lambda o: phase(o) == "Suspended", stall=300)
    ev = stopped["status"]["eviction"]
    assert (ev["reason"], ev["handshake"], ev["stepsLost"]) == ("Suspended", "Checkpointed", 0), ev
    assert steps > ev["resumeFromStep"] >= 100, ev
    cluster.wait_for(lambda: not worker_pods(cluster, namespace, name), timeout=300,
                     what="the suspended job's pods to go")
    assert cluster.get("dt", name, namespace)["status"]["eviction"]["stepsLost"] == 0
    resume_from(cluster, namespace, name, ev["resumeFromStep"], said=said)
    done = finish_exactly(cluster, namespace, name, steps)
    assert done["status"]["checkpoint"]["step"] == steps, done["status"]
    return running


SCRIPTS = REPO / "manifests" / "examples" / "scripts"  # docs/training-api.md's (tests/unit/test_examples.py)


@pytest.mark.timeout(1500)
def test_your_own_loop_reports_progress_and_is_suspended_checkpoint_first(node_cluster, chart_operator, ns):
    """manifests/examples/own-loop.yaml as shipped, running docs/training-api.md's script
    (disttrain.train.Session) in the trainer image: progress and ETA while it runs, a
    checkpoint-first suspend, an exact resume."""
    node_cluster.kubectl("create", "configmap", "train-loop", "-n", ns, f"--from-file={SCRIPTS / 'train_loop.py'}")
    shared_checkpoints(node_cluster, ns, claim="own-loop-checkpoints")
    suspended_mid_run_and_resumed_exactly(node_cluster, ns, "own-loop", REPO / "manifests" / "examples" / "own-loop.yaml")


@pytest.mark.timeout(1500)
def test_instrument_auto_gives_an_unchanged_transformers_script_progress_and_a_checkpoint_first_suspend(
        node_cluster, chart_operator, ns):
    """manifests/examples/zero-code-transformers.yaml as shipped: docs/training-api.md's
    Transformers script without its two disttrain lines, in the trainer image plus
    Transformers. The init container copies disttrain's package in and the start-up hook
    attaches the callback: Instrumented names Transformers; progress, ETA and the
    script's own accuracy in status, a checkpoint-first suspend through Transformers' own checkpoint, an exact resume."""
    node_cluster.kubectl("create", "configmap", "train-hf", "-n", ns, f"--from-file=train.py={SCRIPTS / 'train_hf.py'}")
    shared_checkpoints(node_cluster, ns, claim="zero-code-checkpoints")
    running = suspended_mid_run_and_resumed_exactly(
        node_cluster, ns, "zero-code", REPO / "manifests" / "examples" / "zero-code-transformers.yaml",
        said="resuming from /checkpoints/checkpoint-{step}")
    (instrumented,) = [c for c in running["status"]["conditions"] if c["type"] == "Instrumented"]
    assert (instrumented["status"], instrumented["reason"]) == ("True", "CallbackAttached"), instrumented
    assert "transformers 5." in instrumented["message"]
    # compute_metrics' accuracy, through the report and the operator into the status
    assert 0 <= running["status"]["progress"]["evalMetrics"]["accuracy"] <= 1, running["status"]["progress"]


def test_a_python_function_trains_on_every_worker_through_the_client(node_cluster, chart_operator, ns, tmp_path):
    """docs/cli.md's `client.train(...)` block, run as written (python, the Python client, a
    kubeconfig whose context namespace is the test's): the function travels in the job,
    both pods run it under torchrun in the trainer image, rendezvous over gloo and print
    the same sum; the job Succeeded."""
    text = (REPO / "docs" / "cli.md").read_text()
    (block,) = [b for b in re.findall(r"^```python\n(.*?)^```", text, re.S | re.M) if "client.train(" in b]
    shared_checkpoints(node_cluster, ns, claim="shared-checkpoints")  # the claim the block names
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(Path(node_cluster.kubeconfig).read_text())
    node_cluster.kubectl("config", "set-context", "--current", f"--namespace={ns}", f"--kubeconfig={kubeconfig}")
    script = tmp_path / "train_function.py"  # a file, as a reader saves it: train() reads the function's source
    script.write_text(block)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=900,
                          env={**os.environ, "KUBECONFIG": str(kubeconfig)})
    made = json.loads(node_cluster.kubectl("get", "dt", "-n", ns, "-o", "json").stdout)["items"]
    assert proc.returncode == 0, proc.stderr[-3000:] + json.dumps([j.get("status") for j in made])
    (name,) = [j["metadata"]["name"] for j in made]
    assert name.startswith("all-reduce-")
    assert sorted(line for line in proc.stdout.splitlines() if "sum" in line) == [
        "0 rank 0 of 2: sum 30", "1 rank 1 of 2: sum 30"], job_story(node_cluster, ns, name)
    assert phase(job(node_cluster, ns, name)) == "Succeeded"


def guide_file(name: str) -> dict:
    """The YAML docs/guide.md shows under `<!-- file: NAME -->`, as a reader would save it."""
    found = re.search(rf"<!-- file: {re.escape(name)} -->\n```yaml\n(.*?)^```", GUIDE.read_text(), re.S | re.M)
    assert found, f"docs/guide.md has no {name}"
    return yaml.safe_load(found.group(1))


def test_graceful_delete_of_a_worker_resumes_from_object_storage_and_is_no_success(node_cluster, chart_operator, ns,
                                                                                    node_s3):
    """docs/guide.md's Secret and checkpoint settings, pointed at a real S3 server on the
    node's bridge. The job first waits for its missing Secret and says which; then trains
    with no volume at all. A graceful delete of a worker is a disruption: the job resumes
    from the object store, is never Succeeded short of its steps, finishes at exactly its
    steps, and spends no restart of backoffLimit."""
    steps, name = 200, "s3-job"
    bucket = node_s3.new_bucket()
    secret, guide_job = guide_file("s3-checkpoints.yaml"), guide_file("s3-job.yaml")
    secret["stringData"] = {"AWS_ACCESS_KEY_ID": node_s3.ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": node_s3.SECRET_KEY}
    uri = f"s3://{bucket}/{name}"
    body = example_job(trainer={"builtin": {"model": "gpt-nano", "dataset": "text", "steps": steps, "batchSize": 8,
                                            "learningRate": 0.001}},
                       env=[{"name": "OMP_NUM_THREADS", "value": "1"}])
    body["metadata"] = {"name": name}
    body["spec"]["checkpoint"] = {**guide_job["spec"]["checkpoint"], "uri": uri, "endpoint": node_s3.endpoint,
                                  "intervalSteps": 10, "keep": 2}
    node_cluster.apply(body, namespace=ns)

    # Before its Secret exists no worker can start, and the job says which Secret is missing.
    waiting = wait_job(node_cluster, ns, name, "the missing Secret named on the Running condition", lambda o: any(
        c["type"] == "Running" and c.get("reason") == "ContainerConfigError" and "s3-checkpoints" in c.get("message", "")
        for c in o.get("status", {}).get("conditions", [])), stall=300)
    assert phase(waiting) == "Pending", waiting["status"]
    pod = worker_pods(node_cluster, ns, name)[0]
    assert not [v for v in pod["spec"]["volumes"] if v["name"] == "checkpoints"], pod["spec"]["volumes"]
    node_cluster.apply(secret, namespace=ns)  # the kubelet retries: nothing else to do

    running_workers(node_cluster, ns, name, 2)
    saved = wait_checkpoint(node_cluster, ns, name, 10)
    assert saved["status"]["checkpoint"]["path"].startswith(f"{uri}/step-"), saved["status"]["checkpoint"]
    victim = next(p for p in worker_pods(node_cluster, ns, name) if p["metadata"]["name"] == f"{name}-worker-1")
    node_cluster.kubectl("delete", "pod", "-n", ns, f"{name}-worker-1", "--wait=false")

    def resumed_from_the_store() -> str | None:
        """Once worker-1 is recreated, every rank loads the newest checkpoint from the bucket.
        Read while the pods run: cleanPodPolicy may remove them at the end."""
        pods = [p for p in worker_pods(node_cluster, ns, name) if p["metadata"]["name"] == f"{name}-worker-1"]
        if not pods or pods[0]["metadata"]["uid"] == victim["metadata"]["uid"]:
            return None
        logs = "".join(node_cluster.kubectl("logs", "-n", ns, f"{name}-worker-{i}", check=False).stdout
                       for i in range(2))
        return logs if f"resumed from {uri}/step-" in logs else None

    logs = node_cluster.wait_for(resumed_from_the_store, timeout=300, interval=2,
                                 what="worker-1 recreated and the training resumed from the object store")
    assert "resuming at step 0 " not in logs, logs[-2000:]
    done = finish_exactly(node_cluster, ns, name, steps)  # never Succeeded short of its steps
    # A disruption, not a failure: recreated at once, backoffLimit untouched (docs/operations.md).
    assert done["status"].get("restarts", 0) == 0, done["status"]
    newest = done["status"]["checkpoint"]
    assert newest["step"] == steps and newest["path"].startswith(f"{uri}/step-{steps:08d}-"), newest
    # What the store holds: one committed marker per kept step (keep 2), each naming its folder.
    store = node_s3.filesystem()
    markers = sorted(p.rsplit("/", 1)[-1] for p in store.ls(f"{bucket}/{name}", detail=False) if p.endswith(".commit"))
    assert markers == [f"step-{steps - 10:08d}.commit", f"step-{steps:08d}.commit"], markers
    env = {**node_cluster.env, "PYTHONPATH": str(REPO / "operator")}
    shown = subprocess.run([sys.executable, "-m", "disttrain.cli", "status", name, "-n", ns],
                           capture_output=True, text=True, env=env, timeout=60)
    assert f" at {newest['path']}" in shown.stdout, shown.stdout
    assert node_s3.SECRET_KEY not in json.dumps(done) + shown.stdout, "the secret is never shown"

"""The `disttrain` CLI: exit codes, one-line errors with line numbers, no tracebacks."""

from __future__ import annotations

import contextlib
import io
import json
import re
import os
import subprocess
import sys

import pytest
import yaml

from .conftest import EXAMPLES, ROOT
from .helpers import CLI_ENV, disttrain, job, write

GOOD = """\
apiVersion: disttrain.dev/v1alpha1
kind: DistributedTraining
metadata:
  name: demo
spec:
  nodes: 2
  gpusPerNode: 4
  checkpoint: {claimName: ckpt}
"""


def test_validate_all_examples_exits_zero_and_prints_topology():
    result = disttrain("validate", *EXAMPLES)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "cpu-ddp: valid" in result.stdout
    assert "topology: 2 nodes x 1 process = world size 2, strategy ddp" in result.stdout
    assert "Traceback" not in result.stderr


def test_bad_spec_exits_one_naming_field_value_and_fix(tmp_path):
    path = write(tmp_path, GOOD.replace("  nodes: 2\n", "  nodes: 2\n  strategy: ddpp\n"))
    result = disttrain("validate", path)
    assert result.returncode == 1
    assert f"{path}:7: error: spec.strategy: is not allowed (got 'ddpp'); allowed: auto, ddp, fsdp, " \
           "fsdp_native. Fix: did you mean 'ddp'?" in result.stdout


def test_warnings_do_not_fail_validation(tmp_path):
    path = write(tmp_path, GOOD.replace("gpusPerNode: 4", "gpusPerNode: 1\n  nodes: 1\n  strategy: ddp")
                 .replace("  nodes: 2\n", ""))
    result = disttrain("validate", path)
    assert result.returncode == 0, result.stdout
    assert "warning [DDPSingleDevice] spec.strategy: DDP requires multiple devices, falling back to " \
           "single-device training" in result.stdout


def test_not_yaml_is_one_line_with_line_number(tmp_path):
    path = write(tmp_path, "apiVersion: v1\nkind: [unclosed\nspec: {\n")
    result = disttrain("validate", path)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{path}:") and "not valid YAML" in lines[0]
    assert "Traceback" not in result.stderr


def test_not_a_distributed_training(tmp_path):
    path = write(tmp_path, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    result = disttrain("validate", path)
    assert result.returncode == 1
    assert f"{path}:1: no DistributedTraining in this file" in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_file_and_binary_file(tmp_path):
    assert disttrain("validate", str(tmp_path / "nope.yaml")).stderr.startswith(f"{tmp_path}/nope.yaml: cannot read")
    binary = tmp_path / "blob.yaml"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    result = disttrain("validate", str(binary))
    assert result.returncode == 1 and "Traceback" not in result.stderr


def test_validate_json_reports_a_file_it_cannot_use(tmp_path):
    """-o json is read by programs: a file that cannot be read, or holds no job, is an
    entry of its own with the error, not an empty list beside a line on stderr."""
    other = write(tmp_path, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    missing = str(tmp_path / "nope.yaml")
    result = disttrain("validate", "-o", "json", missing, other)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    reports = json.loads(result.stdout)
    assert [(r["file"], r["valid"], r["name"]) for r in reports] == [(missing, False, None), (other, False, None)]
    assert reports[0]["errors"][0]["message"].startswith(f"{missing}: cannot read")
    assert "no DistributedTraining in this file" in reports[1]["errors"][0]["message"]


def test_multi_document_file_validates_each_job(tmp_path):
    second = GOOD.replace("name: demo", "name: other").replace("nodes: 2", "nodes: 0")
    path = write(tmp_path, GOOD + "---\n" + second)
    result = disttrain("validate", "-o", "json", path)
    assert result.returncode == 1
    reports = json.loads(result.stdout)
    assert [r["name"] for r in reports] == ["demo", "other"]
    assert [r["valid"] for r in reports] == [True, False]
    assert reports[0]["resolved"]["worldSize"] == 8
    assert reports[1]["errors"][0]["field"] == "spec.nodes" and reports[1]["errors"][0]["line"] == 15


def test_stdin(tmp_path):
    result = disttrain("validate", "-", stdin=GOOD)
    assert result.returncode == 0 and "-:1: demo: valid" in result.stdout


def test_render_prints_service_and_pods(tmp_path):
    result = disttrain("render", "-n", "ml", write(tmp_path, GOOD))
    assert result.returncode == 0, result.stderr
    objects = list(yaml.safe_load_all(result.stdout))
    assert [o["kind"] for o in objects] == ["Service", "NetworkPolicy", "PodDisruptionBudget", "Pod", "Pod"]
    assert objects[3]["metadata"]["namespace"] == "ml"
    env = {e["name"]: e.get("value") for e in objects[3]["spec"]["containers"][0]["env"]}
    assert env["PET_RDZV_ENDPOINT"] == "demo-worker-0.demo.ml.svc:29400"
    # The NetworkPolicy the operator creates, admitting the operator from where it runs.
    policy = objects[1]
    assert policy["metadata"] == {"name": "demo", "namespace": "ml", "labels": objects[0]["metadata"]["labels"]}
    operator_peer = policy["spec"]["ingress"][1]["from"][0]
    assert operator_peer["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "disttrain-system"}
    other = disttrain("render", "--operator-namespace", "ops", write(tmp_path, GOOD))
    assert '"kubernetes.io/metadata.name": ops' in other.stdout or "kubernetes.io/metadata.name: ops" in other.stdout
    none = disttrain("render", "--no-network-policy", write(tmp_path, GOOD))
    assert [o["kind"] for o in yaml.safe_load_all(none.stdout)] == ["Service", "PodDisruptionBudget", "Pod", "Pod"]


def test_render_admits_the_operator_from_the_flag_else_the_variable_else_disttrain_system(tmp_path, monkeypatch):
    """The namespace the rendered NetworkPolicy admits the operator from: --operator-namespace,
    else $DISTTRAIN_OPERATOR_NAMESPACE (the operator's own setting), else disttrain-system;
    an empty variable counts as unset."""
    path = write(tmp_path, GOOD)

    def admitted(*flags: str) -> str:
        result = disttrain("render", *flags, path)
        assert result.returncode == 0, result.stderr
        policy = next(o for o in yaml.safe_load_all(result.stdout) if o["kind"] == "NetworkPolicy")
        return policy["spec"]["ingress"][1]["from"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]

    monkeypatch.setenv("DISTTRAIN_OPERATOR_NAMESPACE", "from-env")
    assert (admitted(), admitted("--operator-namespace", "ops")) == ("from-env", "ops")
    monkeypatch.setenv("DISTTRAIN_OPERATOR_NAMESPACE", "")
    assert admitted() == "disttrain-system"


def test_a_reader_that_stops_early_ends_the_command_quietly_with_zero():
    """`disttrain render job.yaml | head`: once head has its lines and closes the pipe, the
    next write fails with BrokenPipeError; the command ends with 0 and says nothing, as
    cat does. In this process (a stdout whose reader has gone), and as a process whose
    output outgrows the pipe's buffer, so that it must still be writing when head leaves."""
    from disttrain.cli.main import main

    class ReaderGone(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

    # no "skipping" lines, no job naming a template (checked without it, it says so)
    jobs = [e for e in EXAMPLES if "kind: PersistentVolumeClaim" not in open(e).read() and "templateRef" not in open(e).read()]
    err = io.StringIO()
    with contextlib.redirect_stdout(ReaderGone()), contextlib.redirect_stderr(err):
        assert main(["render", *jobs]) == 0
    assert err.getvalue() == ""

    # Those jobs' objects 20 times over: about 190 KB, three times what a pipe holds.
    process = subprocess.Popen([sys.executable, "-m", "disttrain.cli", "render", *jobs * 20],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=CLI_ENV)
    assert process.stdout.readline() == b"apiVersion: v1\n"
    process.stdout.close()  # head has had enough
    assert (process.wait(timeout=60), process.stderr.read()) == (0, b"")


def test_render_refuses_invalid_specs(tmp_path):
    result = disttrain("render", write(tmp_path, GOOD.replace("nodes: 2", "nodes: -1")))
    assert result.returncode == 1 and result.stdout == ""
    assert "spec.nodes: is out of range (got -1)" in result.stderr


def test_render_goes_on_past_an_invalid_file_says_warnings_and_prints_nothing_if_any_failed(tmp_path, monkeypatch):
    """Every file is checked: an invalid one is reported, the next still has its warnings
    said (FILE:LINE: warning [REASON] FIELD: ...), and with any file invalid nothing is
    printed and the exit is 1. -o json prints the same objects as JSON; a bad setting of
    the operator's network policy is one line, exit 1."""
    bad, warned = tmp_path / "bad.yaml", tmp_path / "warned.yaml"
    bad.write_text(GOOD.replace("nodes: 2", "nodes: -1"))
    warned.write_text(GOOD.replace("  checkpoint: {claimName: ckpt}\n", "  checkpoint: {claimName: ckpt}\n"
                                   "  strategy: ddp\n  gpusPerNode: 1\n").replace("  gpusPerNode: 4\n", "")
                      .replace("nodes: 2", "nodes: 1"))
    both = disttrain("render", str(bad), str(warned))
    assert (both.returncode, both.stdout) == (1, "")
    assert "spec.nodes: is out of range (got -1)" in both.stderr
    assert re.search(rf"^{re.escape(str(warned))}:\d+: warning \[\w+\] spec\.\w+: ", both.stderr, re.M), both.stderr

    as_json = json.loads(disttrain("render", "-o", "json", write(tmp_path, GOOD)).stdout)
    text = disttrain("render", write(tmp_path, GOOD)).stdout
    as_yaml = list(yaml.safe_load_all(text))
    assert as_json == as_yaml and [o["kind"] for o in as_json][:2] == ["Service", "NetworkPolicy"]
    assert text.startswith("apiVersion: v1\nkind: Service\nmetadata:\n  name: demo\n")  # as rendered, not sorted

    monkeypatch.setenv("DISTTRAIN_NETWORK_POLICY", "maybe")
    refused = disttrain("render", write(tmp_path, GOOD))
    assert (refused.returncode, refused.stdout) == (1, "")
    assert refused.stderr == "error: DISTTRAIN_NETWORK_POLICY='maybe': set it to true or false\n"


def test_an_unreadable_file_is_a_report_like_an_invalid_job_in_json(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("spec: [unclosed\n")
    out = disttrain("validate", str(path), "-o", "json")
    assert out.returncode == 1
    [entry] = json.loads(out.stdout)
    assert entry.keys() == {"file", "line", "name", "valid", "warnings", "errors"}
    assert (entry["file"], entry["line"], entry["name"], entry["valid"], entry["warnings"]) == (
        str(path), None, None, False, [])
    [error] = entry["errors"]
    assert error.keys() == {"field", "message", "line"} and (error["field"], error["line"]) == (None, None)
    assert error["message"]


TOPOLOGIES = """\
apiVersion: disttrain.dev/v1alpha1
kind: DistributedTraining
metadata: {name: gpu}
spec: {nodes: 2, gpusPerNode: 4, checkpoint: {claimName: ckpt}, trainer: {builtin: {steps: 1000}}}
---
apiVersion: disttrain.dev/v1alpha1
kind: DistributedTraining
metadata: {name: elastic, labels: {kueue.x-k8s.io/queue-name: team-a}}
spec: {nodes: 2, minNodes: 1, maxNodes: 3, checkpoint: {claimName: ckpt}, trainer: {builtin: {steps: 1000}}}
---
apiVersion: disttrain.dev/v1alpha1
kind: DistributedTraining
metadata: {name: one}
spec: {nodes: 1, nprocPerNode: 2, trainer: {builtin: {steps: 1000}}, checkpoint: {storage: none}}
---
apiVersion: disttrain.dev/v1alpha1
kind: DistributedTraining
metadata: {}
spec: {nodes: 1}
---
apiVersion: disttrain.dev/v1alpha1
kind: DistributedTraining
metadata: {name: single}
spec: {nodes: 1, gpusPerNode: 1, trainer: {builtin: {steps: 1000}}, checkpoint: {storage: none}}
"""


def test_validate_says_each_jobs_topology_in_words_with_singulars_elastic_range_and_queue(tmp_path):
    """validate's text report, whole: GPUs or CPU per node (1 GPU, 4 GPUs), processes per
    node (1 process, 2 processes), an elastic range, the Kueue queue a job waits in, and a
    job without a name as (unnamed)."""
    path = write(tmp_path, TOPOLOGIES)
    out = disttrain("validate", path)
    assert out.returncode == 1  # the unnamed one
    kueue = ("  queue: Kueue LocalQueue team-a (kueue.x-k8s.io/queue-name): held, no worker created, until Kueue "
             "admits its Workload (an operator run with DISTTRAIN_KUEUE)")
    assert out.stdout.splitlines() == [
        f"{path}:1: gpu: valid",
        "  topology: 2 nodes x 4 processes = world size 8, strategy auto, precision bf16-mixed, 4 GPUs per node",
        f"{path}:6: elastic: valid",
        "  topology: 2 nodes (elastic 1..3) x 1 process = world size 2, strategy auto, precision 32, CPU per node",
        kueue,
        f"{path}:11: one: valid",
        "  topology: 1 node x 2 processes = world size 2, strategy auto, precision 32, CPU per node",
        f"{path}:16: (unnamed): invalid",
        f"  {path}:18: error: metadata.name: is required (not set); allowed: a DNS label. Fix: set metadata.name: "
        "my-job",
        f"{path}:21: single: valid",
        "  topology: 1 node x 1 process = world size 1, strategy auto, precision bf16-mixed, 1 GPU per node"]


def test_submit_checks_every_file_offline_and_sends_nothing_if_one_is_wrong(tmp_path):
    """Before anything is sent (no cluster here: a kubeconfig that does not exist), submit
    checks each document: an invalid one, a namespace that contradicts -n, a file it cannot
    read, stdin named twice. Any of them: nothing is said created."""
    offline = ["--kubeconfig", str(tmp_path / "none"), "--dry-run=client"]
    placed = job(nodes=1)  # metadata.namespace team-a
    path = tmp_path / "placed.yaml"
    path.write_text(yaml.safe_dump(placed))
    other = disttrain("submit", "-f", str(path), "-n", "other", *offline)
    assert (other.returncode, other.stdout) == (1, "")
    assert other.stderr.splitlines()[-1] == (f"error: {path}:1: the object's namespace 'team-a' does not match "
                                             "-n 'other'; drop one of them")
    same = disttrain("submit", "-f", str(path), "-n", "team-a", *offline)
    assert (same.returncode, same.stdout) == (0, "distributedtraining.disttrain.dev/demo created (dry run)\n")

    mixed = tmp_path / "mixed.yaml"
    mixed.write_text(yaml.safe_dump_all([job(nodes=0), placed]))
    refused = disttrain("submit", "-f", str(mixed), "-n", "other", *offline)
    assert (refused.returncode, refused.stdout) == (1, "")  # the valid one is not sent either
    # Every reason at once: the invalid job's, and the other's namespace.
    assert "spec.nodes" in refused.stderr and "namespace 'team-a' does not match -n 'other'" in refused.stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump({**placed, "metadata": ["demo"]}))
    unnamed = disttrain("submit", "-f", str(broken), "-n", "other", *offline)
    assert (unnamed.returncode, unnamed.stdout) == (1, "") and "metadata" in unnamed.stderr

    twice = disttrain("submit", "-f", "-", "-f", "-", *offline)
    assert (twice.returncode, twice.stderr.splitlines()[-1]) == (2, "error: stdin (-) can be read once")
    missing = disttrain("submit", "-f", str(tmp_path / "missing.yaml"), *offline)
    assert (missing.returncode, missing.stdout) == (1, "")
    assert missing.stderr == f"{tmp_path / 'missing.yaml'}: cannot read: No such file or directory\n"


def test_other_kinds_in_a_file_are_said_skipped_and_a_file_of_none_is_an_error(tmp_path):
    """A manifest file may hold a ConfigMap beside the job: it is said skipped on stderr and
    the job is checked; a file with no DistributedTraining at all is an error naming what
    was expected, exit 1."""
    config_map = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\n"
    path = tmp_path / "mixed.yaml"
    path.write_text(config_map + "---\n" + GOOD)
    mixed = disttrain("validate", str(path))
    assert mixed.returncode == 0 and f"{path}:5: demo: valid" in mixed.stdout, mixed.stdout + mixed.stderr
    assert mixed.stderr.splitlines() == [f"{path}:1: skipping a ConfigMap (v1): not a DistributedTraining"]
    path.write_text(config_map)
    none = disttrain("validate", str(path))
    assert (none.returncode, none.stdout) == (1, "")
    assert none.stderr.splitlines() == [
        f"{path}:1: skipping a ConfigMap (v1): not a DistributedTraining",
        f"{path}:1: no DistributedTraining in this file (expected apiVersion: disttrain.dev/v1alpha1, kind: "
        "DistributedTraining)"]


def test_logs_prefixes_each_line_with_its_worker_and_passes_every_option_to_the_client(monkeypatch, tmp_path):
    """`logs`: what the CLI adds to Client.logs (which reads real pods: tests/e2e/test_cli_logs.py
    on the real node). Here a stand-in Client records the call and yields lines, because
    pods that really log exist only there: the worker prefix ([worker-?] for a line of
    none), --timestamps after it, and each option handed on as given."""
    from disttrain.client import client

    calls = []

    class Logging:
        def __init__(self, namespace, **kwargs):
            self.namespace = namespace

        def logs(self, name, **options):
            calls.append((self.namespace, name, options))
            yield client.LogLine(0, "step 1", "2026-11-27T10:00:00Z")
            yield client.LogLine(None, "from an unlabelled pod", "2026-11-27T10:00:01Z")

    monkeypatch.setattr(client, "Client", Logging)
    plain = disttrain("logs", "demo", "-n", "team-a", "--kubeconfig", str(tmp_path / "none"))
    assert (plain.returncode, plain.stdout) == (0, "[worker-0] step 1\n[worker-?] from an unlabelled pod\n")
    assert calls[-1] == ("team-a", "demo", {"worker": None, "follow": False, "tail": None, "since": None,
                                            "previous": False})
    stamped = disttrain("logs", "demo", "--worker", "0", "-f", "--tail", "5", "--since", "5m", "-p", "--timestamps")
    assert stamped.stdout.splitlines() == ["[worker-0] 2026-11-27T10:00:00Z step 1",
                                           "[worker-?] 2026-11-27T10:00:01Z from an unlabelled pod"]
    assert calls[-1][2] == {"worker": 0, "follow": True, "tail": 5, "since": 300.0, "previous": True}


def test_run_local_hands_the_validated_job_and_every_option_to_the_local_runner(monkeypatch, tmp_path):
    """What `run --local` adds to local_run.run_local (which trains for real under torchrun:
    tests/trainer/test_local_run.py): the file's one job, validated and resolved, and the
    options as given; its exit code is the command's. A stand-in runner records the call
    here, because a real run is the trainer tests' (minutes of torch, no mutant can afford)."""
    from disttrain.local import run as local_run

    calls = []

    def runner(job, resolved, **options):
        calls.append((job.name, resolved.world_size, options))
        return 3

    monkeypatch.setattr(local_run, "run_local", runner)
    path = write(tmp_path, GOOD.replace("  gpusPerNode: 4\n", ""))
    out = disttrain("run", "--local", path, "--workdir", str(tmp_path / "w"), "--no-progress",
                    "--checkpoint-uri", "s3://bucket/ckpt")
    assert out.returncode == 3, out.stderr
    assert calls == [("demo", 2, {"workdir": str(tmp_path / "w"), "progress": False,
                                  "checkpoint_uri": "s3://bucket/ckpt"})]
    assert f"{path}:1: demo: valid" in out.stderr  # the report goes to stderr: stdout is the run's
    disttrain("run", "--local", path)
    assert calls[-1][2] == {"workdir": ".disttrain", "progress": True, "checkpoint_uri": None}
    two = tmp_path / "two.yaml"
    two.write_text(GOOD + "---\n" + GOOD)
    refused = disttrain("run", "--local", str(two))
    assert (refused.returncode, refused.stderr) == (
        1, f"{two}: holds 2 DistributedTrainings; run --local takes one per call\n") and len(calls) == 2


def test_run_local_says_what_it_cannot_run_before_it_runs_anything(monkeypatch, tmp_path):
    """No file: exit 1, nothing run. A --checkpoint-uri that is no object-store prefix: a
    usage error (2) in spec.checkpoint.uri's words. A job held for a Kueue queue runs
    locally all the same, and the report says so on stderr (stdout is the run's)."""
    from disttrain.local import run as local_run

    calls = []
    monkeypatch.setattr(local_run, "run_local", lambda job, resolved, **options: calls.append(job.name) or 0)
    missing = disttrain("run", "--local", str(tmp_path / "none.yaml"))
    assert missing.returncode == 1 and "none.yaml" in missing.stderr and calls == []
    path = write(tmp_path, GOOD.replace("  name: demo\n", "  name: demo\n  labels: {kueue.x-k8s.io/queue-name: team-a}\n"))
    bad = disttrain("run", "--local", path, "--checkpoint-uri", "/mnt/ckpt")
    assert bad.returncode == 2 and calls == []
    assert ("'/mnt/ckpt' is not an object-store prefix: write s3://<bucket>/<prefix>, the bucket 3-63 "
            "lowercase letters, digits, '.' or '-'") in bad.stderr
    held = disttrain("run", "--local", path)
    assert (held.returncode, held.stdout, calls) == (0, "", ["demo"])
    assert "  queue: Kueue LocalQueue team-a (kueue.x-k8s.io/queue-name): held, no worker created" in held.stderr


@pytest.mark.parametrize("kind, plural", [("DistributedTraining", "distributedtrainings"),
                                          ("TrainingTemplate", "trainingtemplates"),
                                          ("ClusterTrainingTemplate", "clustertrainingtemplates")])
def test_crd_command_prints_the_committed_crd(kind, plural):
    result = disttrain("crd", "--kind", kind)
    committed = yaml.safe_load(open(os.path.join(ROOT, "manifests", "crd", f"disttrain.dev_{plural}.yaml")))
    assert yaml.safe_load(result.stdout) == committed
    assert json.loads(disttrain("crd", "--kind", kind, "-o", "json").stdout) == committed


def test_crd_command_prints_every_crd_the_operator_serves():
    """`disttrain crd | kubectl apply -f -` (the Quick start's, the missing-CRD error's fix)
    installs the templates' kinds too: one YAML stream, each document the committed file
    byte for byte; -o json a List of them, which kubectl applies alike."""
    files = [open(os.path.join(ROOT, "manifests", "crd", f"disttrain.dev_{plural}.yaml")).read()
             for plural in ("distributedtrainings", "trainingtemplates", "clustertrainingtemplates")]
    assert disttrain("crd").stdout == "---\n".join(files)
    listed = json.loads(disttrain("crd", "-o", "json").stdout)
    assert (listed["apiVersion"], listed["kind"]) == ("v1", "List")
    assert listed["items"] == [yaml.safe_load(text) for text in files]


def test_the_committed_cli_reference_is_what_every_commands_help_prints(monkeypatch):
    """docs/cli-reference.md is `disttrain docs cli`, and each of its sections is what
    `disttrain COMMAND --help` prints on a terminal of that width: a flag, a default or a
    help text changed in the code and not in the reference fails here."""
    from disttrain.cli.docs import REFERENCE_COLUMNS
    from disttrain.cli.main import COMMANDS

    reference = disttrain("docs", "cli").stdout
    with open(os.path.join(ROOT, "docs", "cli-reference.md")) as handle:
        assert handle.read() == reference, "docs/cli-reference.md drifted: run `make crd`"
    # The same reference however it is run: as the kubectl plugin too, it names `disttrain`.
    monkeypatch.setattr(sys, "argv", ["/usr/local/bin/kubectl-disttrain"])
    assert disttrain("docs", "cli").stdout == reference
    blocks = re.findall(r"```text\n(.*?)```\n", reference, re.S)
    assert len(blocks) == 1 + len(COMMANDS) and len(COMMANDS) >= 18
    monkeypatch.setenv("COLUMNS", str(REFERENCE_COLUMNS + 2))  # argparse wraps at COLUMNS - 2
    monkeypatch.setattr(sys, "argv", ["disttrain"])
    top = disttrain("--help")
    assert top.returncode == 0 and top.stdout == blocks[0]
    for command, block in zip(COMMANDS, blocks[1:], strict=True):
        assert f"\n## {command.name}\n\n```text\n{block}" in reference
        shown = disttrain(command.name, "--help")
        assert shown.returncode == 0 and shown.stdout == block, command.name


def test_a_report_names_a_job_only_by_a_name_it_could_have(tmp_path):
    """validate -o json's `name`: the job's, up to 253 characters (a Kubernetes name's most);
    none for a longer one or a metadata that is no mapping, which is an error, not a crash."""
    def named(metadata: str) -> tuple[int, object]:
        out = disttrain("validate", "-o", "json", write(tmp_path, GOOD.replace("metadata:\n  name: demo\n", metadata)))
        return out.returncode, json.loads(out.stdout)[0]["name"]

    assert named(f"metadata:\n  name: {'a' * 253}\n")[1] == "a" * 253
    assert named(f"metadata:\n  name: {'a' * 254}\n") == (1, None)
    assert named("metadata: [demo]\n") == (1, None)


def test_run_requires_local():
    result = disttrain("run", EXAMPLES[0])
    assert result.returncode == 2 and "--local" in result.stderr


def test_an_unreachable_api_server_is_tried_once_not_retried(tmp_path):
    """Like kubectl, the CLI fails at once on a server it cannot talk to: one connection,
    counted by a listener that hangs up on every one (urllib3 would otherwise try four times)."""
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    port, accepted = listener.getsockname()[1], []

    def hang_up() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(1)
            conn.close()

    threading.Thread(target=hang_up, daemon=True).start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{port}", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": "n"}}]}))
    try:
        result = subprocess.run([sys.executable, "-m", "disttrain.cli", "get", "x", "--kubeconfig",
                                 str(kubeconfig)], capture_output=True, text=True, env=CLI_ENV, timeout=60)
    finally:
        listener.close()
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith(f"Unable to connect to the server https://127.0.0.1:{port}"), result.stderr
    assert len(accepted) == 1


@pytest.mark.parametrize("text,says", [
    ("apiVersion: v1\nclusters: [\n  - {name: x\n", "not YAML (line 3, column 3): expected the node content, but found "
                                                 "'-'; check the file, or point --kubeconfig at another"),
    ("apiVersion: v1\ncurrent-context: c\nclusters: [{name: k, cluster: {server: 5}}]\nusers: [{name: u, user: {}}]\n"
     "contexts: [{name: c, context: {cluster: k, user: u}}]\n", "not a kubeconfig: AttributeError: "),  # the library's
    ("just a string\n", "not a kubeconfig: the file must be a map with clusters, contexts and users (got str)"),
    ("apiVersion: v1\ncontexts: 5\ncurrent-context: c\n", "not a kubeconfig: contexts must be a list of {name, context} (got int)"),
    ("apiVersion: v1\nclusters: [{cluster: {server: x}}]\n", "not a kubeconfig: clusters[0] must be a map with a name"),
    ("apiVersion: v1\nusers: [{name: u, user: [1]}]\n", "not a kubeconfig: users[0].user must be a map"),
    (b"\napiVersion: v1\n# caf\xe9 (Latin-1)\nclusters: []\n", "line 3 is not UTF-8 (byte 0xe9); save the file as UTF-8"),
    ("\napiVersion: v1\nkind: Config\x01\n", "not YAML: line 3 holds the character #x0001, which YAML does not allow"),
])
def test_a_broken_kubeconfig_is_one_line_naming_the_file(tmp_path, text, says):
    """docs/cli.md: never a traceback. A kubeconfig that is not UTF-8, not YAML, or not shaped
    like one, is named with what is wrong, exit code 1; and from Python it is a KubeconfigError."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_bytes(text if isinstance(text, bytes) else text.encode())
    result = disttrain("get", "--kubeconfig", str(kubeconfig))
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    line = result.stderr.strip()
    assert len(line.splitlines()) == 1 and line.startswith(f"error: {kubeconfig}: ") and says in line, line
    check = ("from disttrain import Client, KubeconfigError\n"
             f"try:\n    Client(kubeconfig={str(kubeconfig)!r})\nexcept KubeconfigError as exc:\n    print('caught', exc)\n")
    out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, env=CLI_ENV, timeout=60)
    assert out.stdout.startswith("caught error: "), out.stderr[-2000:]


def test_an_unknown_context_and_a_missing_kubeconfig_are_kubeconfig_errors(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\ncontexts: [{name: c, context: {cluster: k, user: u}}]\ncurrent-context: c\n"
                          "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\nusers: [{name: u, user: {}}]\n")
    result = disttrain("get", "--kubeconfig", str(kubeconfig), "--context", "nope")
    assert result.returncode == 1
    assert result.stderr.strip() == f'error: context "nope" does not exist in {kubeconfig}; known: c'
    check = ("from disttrain import Client, KubeconfigError\n"
             f"for kw in ({{'kubeconfig': {str(kubeconfig)!r}, 'context': 'nope'}}, {{'kubeconfig': {str(tmp_path / 'none')!r}}}):\n"
             "    try:\n        Client(**kw)\n    except KubeconfigError as exc:\n        print('caught')\n")
    out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, env=CLI_ENV, timeout=60)
    assert out.stdout.split() == ["caught", "caught"], out.stderr[-2000:]


def without(package: str, *argv: str) -> subprocess.CompletedProcess:
    """`disttrain ARGV` in a process whose installation lacks `package` (an extra not
    installed): nothing imported before, so any import of it fails."""
    code = (f"import sys; sys.modules[{package!r}] = None\n"
            f"from disttrain.cli.main import main\nsys.exit(main({list(argv)!r}))\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=CLI_ENV, timeout=60)


def needs(command: str, package: str, extra: str) -> str:
    return (f"error: disttrain {command} needs the Python package {package!r}, which this "
            f"installation lacks: pip install 'disttrain[{extra}]'\n")


@pytest.mark.parametrize("package,argv,extra", [
    ("kubernetes", ["get"], "cli"),
    ("kubernetes", ["logs", "x"], "cli"),
    ("torch", ["run", "--local", str(EXAMPLES[0])], "local"),
    ("optuna", ["sweep", "x.yaml"], "sweep"),
])
def test_a_command_without_its_extra_names_the_package_and_the_extra(package, argv, extra, monkeypatch):
    """docs/cli.md's install table: the base package validates and renders; each other
    command says which extra it needs before it starts, instead of a ModuleNotFoundError
    (a package set to None in sys.modules is one importlib finds no spec for)."""
    monkeypatch.setitem(sys.modules, package, None)
    result = disttrain(*argv)
    assert (result.returncode, result.stdout, result.stderr) == (1, "", needs(argv[0], package, extra))


@pytest.mark.parametrize("absent", ["kubernetes", "kubernetes.config.config_exception"])
def test_a_branch_that_needs_an_extra_names_its_package_before_it_starts(absent, monkeypatch, tmp_path):
    """A sweep needs optuna; in cluster mode it needs the cluster's extra too, which it
    finds lacking only on that branch: the same one line names the package (not the
    module of it that is missing, when the install is broken), and nothing has started."""
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(open(os.path.join(ROOT, "manifests", "examples", "sweeps", "mlp-lr.yaml")).read())
    monkeypatch.setitem(sys.modules, absent, None)
    result = disttrain("sweep", str(sweep), "--mode", "cluster", "--workdir", str(tmp_path / "w"),
                       "--kubeconfig", str(tmp_path / "none"))
    assert (result.returncode, result.stdout, result.stderr) == (1, "", needs("sweep", "kubernetes", "cli"))
    assert not (tmp_path / "w").exists()


def test_offline_commands_need_no_extra(tmp_path):
    for package in ("kubernetes", "torch", "optuna", "kopf"):
        result = without(package, "validate", str(EXAMPLES[0]))
        assert result.returncode == 0, (package, result.stderr[-2000:])


def test_without_tqdm_the_local_run_prints_lines_and_says_why(monkeypatch):
    import io

    from disttrain.local.run import _Progress

    monkeypatch.setitem(sys.modules, "tqdm", None)
    out = io.StringIO()
    assert _Progress(True, out).enabled is False
    assert out.getvalue().startswith("no progress bar: the tqdm package is not installed (pip install 'disttrain[local]')")


def test_a_cluster_sweep_reads_the_cluster_like_every_cluster_command(tmp_path):
    """docs/cli.md: every cluster command takes --context and --kubeconfig; a sweep in
    cluster mode says what is wrong with them before it starts, in the same words."""
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(open(os.path.join(ROOT, "manifests", "examples", "sweeps", "mlp-lr.yaml")).read())
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\ncontexts: [{name: c, context: {cluster: k, user: u}}]\ncurrent-context: c\n"
                          "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\nusers: [{name: u, user: {}}]\n")
    result = disttrain("sweep", str(sweep), "--mode", "cluster", "--workdir", str(tmp_path / "w"),
                       "--kubeconfig", str(kubeconfig), "--context", "nope")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.stderr.strip() == f'error: context "nope" does not exist in {kubeconfig}; known: c'
    assert not (tmp_path / "w").exists()  # nothing started


def silent_server(tmp_path):
    """A kubeconfig for a server that accepts connections and never answers; the listener."""
    import socket

    listener = socket.create_server(("127.0.0.1", 0))
    listener.listen(16)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{listener.getsockname()[1]}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    return kubeconfig, listener


def test_request_timeout_bounds_a_request_to_a_server_that_never_answers(tmp_path):
    """kubectl's --request-timeout: without it this command would wait the default 60 s
    for an answer and the helper's 60 s ceiling would fail the test."""
    kubeconfig, listener = silent_server(tmp_path)
    try:
        result = disttrain("get", "x", "--kubeconfig", str(kubeconfig), "--request-timeout", "1s")
    finally:
        listener.close()
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    line = result.stderr.strip()
    assert len(line.splitlines()) == 1 and line.startswith("Unable to connect to the server http://127.0.0.1:")
    assert "timed out" in line, line


def test_request_timeout_reaches_the_client_of_every_cluster_command(tmp_path):
    """--request-timeout is the limit of each request the command sends: the stand-in API
    server answers 2 s late, so 1s fails where 10s (and the default 60 s) gets the job."""
    from .helpers import late_server

    with late_server(tmp_path, {"GET"}) as kubeconfig:
        short = disttrain("get", "slow", "--kubeconfig", kubeconfig, "--request-timeout", "1s", "-o", "name")
        long = disttrain("get", "slow", "--kubeconfig", kubeconfig, "--request-timeout", "10s", "-o", "name")
    assert short.returncode == 1 and "timed out" in short.stderr, short.stderr
    assert (long.returncode, long.stdout) == (0, "distributedtraining.disttrain.dev/slow\n"), long.stderr


def test_a_bad_request_timeout_is_a_usage_error_naming_the_flag(tmp_path):
    result = disttrain("get", "--request-timeout", "soon")
    assert result.returncode == 2
    assert "--request-timeout: invalid duration 'soon'" in result.stderr


def test_name_completion_asks_the_cluster_with_a_short_timeout(monkeypatch):
    import argparse

    from disttrain.cli import cluster as cli
    from disttrain.client import client

    made = []

    class Recording:
        def __init__(self, *args, **kwargs):
            made.append(kwargs)
            raise client.Unreachable("away")

    monkeypatch.setattr(client, "Client", Recording)
    args = argparse.Namespace(namespace=None, context=None, kubeconfig=None)
    assert cli.job_names("", args) == []
    assert made[0]["request_timeout"] == cli.COMPLETION_TIMEOUT <= 2


def test_name_completion_lists_the_jobs_where_the_command_line_points(monkeypatch):
    """-n, --context and --kubeconfig typed before the TAB say which cluster and namespace
    the names come from; only names with the typed prefix are offered."""
    import argparse

    from disttrain.cli import cluster as cli
    from disttrain.client import client

    made = []

    class Listing:
        def __init__(self, *args, **kwargs):
            made.append((args, kwargs))

        def list(self):
            return [{"metadata": {"name": name}} for name in ("train-a", "train-b", "eval")]

    monkeypatch.setattr(client, "Client", Listing)
    args = argparse.Namespace(namespace="team-a", context="lab", kubeconfig="/etc/lab.kubeconfig")
    assert cli.job_names("train-", args) == ["train-a", "train-b"]
    assert made == [(("team-a",), {"context": "lab", "kubeconfig": "/etc/lab.kubeconfig",
                                    "request_timeout": cli.COMPLETION_TIMEOUT})]
    assert cli.job_names("", argparse.Namespace()) == ["train-a", "train-b", "eval"]  # a command without them
    assert made[-1] == ((None,), {"context": None, "kubeconfig": None, "request_timeout": cli.COMPLETION_TIMEOUT})


def test_version_is_the_package_the_chart_and_the_api():
    import tomllib

    from disttrain import __version__

    project = tomllib.loads(open(os.path.join(ROOT, "pyproject.toml")).read())["project"]["version"]
    chart = yaml.safe_load(open(os.path.join(ROOT, "charts", "disttrain", "Chart.yaml")))["appVersion"]
    assert __version__ == project == chart


def test_version_says_the_package_the_api_and_python_in_each_format():
    """(Apart from the test above, which reads pyproject.toml: the mutation run's work tree
    has its own.)"""
    from disttrain import __version__

    python = ".".join(map(str, sys.version_info[:3]))
    text = disttrain("version")
    assert (text.returncode, text.stdout) == (0, f"disttrain {__version__} (API disttrain.dev/v1alpha1, "
                                                 f"Python {python})\n")
    expected = {"disttrain": __version__, "api": "disttrain.dev/v1alpha1", "python": python}
    assert json.loads(disttrain("version", "-o", "json").stdout) == expected
    assert yaml.safe_load(disttrain("version", "-o", "yaml").stdout) == expected
    # In the order said, not sorted; JSON indented by 2, as kubectl prints it.
    assert disttrain("version", "-o", "yaml").stdout == (f"disttrain: {__version__}\napi: disttrain.dev/v1alpha1\n"
                                                         f"python: {python}\n")
    assert disttrain("version", "-o", "json").stdout == json.dumps(expected, indent=2) + "\n"


def test_apply_dry_run_client_checks_offline_and_names_each_job(tmp_path):
    """`apply --dry-run=client` sends nothing (no cluster here): each job is said
    "configured (dry run)" by name, exit 0; a job without a name is refused (apply needs
    one), exit 1, and nothing is said configured."""
    path = tmp_path / "jobs.yaml"
    first, second = job(nodes=1), job(nodes=1)
    first["metadata"]["name"], second["metadata"]["name"] = "first", "second"
    path.write_text(yaml.safe_dump_all([first, second]))
    away = ["--dry-run=client", "--kubeconfig", str(tmp_path / "none")]
    out = disttrain("apply", "-f", str(path), *away)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["distributedtraining.disttrain.dev/first configured (dry run)",
                                       "distributedtraining.disttrain.dev/second configured (dry run)"]
    path.write_text(yaml.safe_dump_all([first, {**second, "metadata": {}}]))
    unnamed = disttrain("apply", "-f", str(path), *away)
    assert (unnamed.returncode, unnamed.stdout) == (1, "") and "metadata.name: is required" in unnamed.stderr


def test_completion_prints_a_script_the_shell_takes(tmp_path):
    """`disttrain completion bash`: sourced, bash completes both names of the program."""
    script = disttrain("completion", "bash").stdout
    (tmp_path / "c.bash").write_text(script)
    probe = subprocess.run(["bash", "-c", f"source {tmp_path / 'c.bash'} && complete -p disttrain kubectl-disttrain"],
                           capture_output=True, text=True, timeout=60)
    assert probe.returncode == 0, probe.stderr
    assert [line.split()[-1] for line in probe.stdout.splitlines()] == ["disttrain", "kubectl-disttrain"]
    assert disttrain("completion", "zsh").stdout.startswith("#compdef disttrain kubectl-disttrain")
    assert "function __fish_disttrain_complete" in disttrain("completion", "fish").stdout
    assert disttrain("completion", "tcsh").returncode == 2  # a usage error naming the choices


def test_an_output_format_get_cannot_print_is_a_usage_error_before_the_cluster_is_asked(tmp_path):
    """`get -o`: kubectl's words for a format it does not know (a known one with `=` too); a
    template or a column spec that does not parse says so, naming the format: exit 2, and
    no request (the kubeconfig here does not exist)."""
    offline = ["--kubeconfig", str(tmp_path / "none")]
    allowed = ("allowed formats are: text, wide, name, json, yaml, jsonpath=TEMPLATE, "
               "custom-columns=HEADER:PATH,...")
    for given in ("xml", "json=x"):
        out = disttrain("get", "-o", given, *offline)
        assert out.returncode == 2, out.stderr
        assert f"unable to match a printer suitable for the output format '{given}', {allowed}" in out.stderr
    columns = disttrain("get", "-o", "custom-columns=NAME", *offline)
    assert columns.returncode == 2 and "argument -o/--output: custom-columns: " in columns.stderr, columns.stderr
    template = disttrain("get", "-o", "jsonpath={.status", *offline)
    assert template.returncode == 2 and "argument -o/--output: jsonpath: " in template.stderr, template.stderr

"""What `disttrain get|status|top|submit|wait` print, from the object alone (jobview.py), and
the typed spec the Python client sends (manifest.py). Pure: no cluster."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest

from disttrain.api import types as t
from disttrain.api.validate import validate_document
from disttrain.client.jobview import (NO_OPERATOR, JobView, bar, duration, event_line, progress_line, status_lines,
                                      top_table, view_of)
from disttrain.client.waiting import MET, NEVER, WAITING, parse_duration, wait_decision
from disttrain.client.manifest import manifest_of

from .conftest import ROOT

NOW = datetime(2026, 11, 23, 12, 0, 0, tzinfo=timezone.utc)


def stamp(seconds_ago: float) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def job(**status) -> dict:
    return {"apiVersion": "disttrain.dev/v1alpha1", "kind": "DistributedTraining",
            "metadata": {"name": "gpt", "namespace": "team", "creationTimestamp": stamp(750)},
            "spec": {"nodes": 2, "trainer": {"builtin": {"steps": 100, "batchSize": 8}}, "accumulateGradBatches": 2},
            "status": {"phase": "Running", "resolved": {"worldSize": 4, "nprocPerNode": 2}, "workers": {"active": 2, "running": 2, "desired": 2},
                       "progress": {"step": 40, "totalSteps": 100, "loss": 2.5, "samplesPerSecond": 64.0},
                       "checkpoint": {"step": 40, "time": stamp(30)}, "restarts": 1, **status}}


def test_view_reads_progress_checkpoint_and_eta_from_status():
    view = view_of(job())
    assert (view.phase, view.step, view.total_steps, view.world_size, view.restarts) == ("Running", 40, 100, 4, 1)
    # global batch 8 x 4 ranks x 2 accumulation = 64 samples/step at 64 samples/s: 1 s/step, 60 left
    assert view.global_batch == 64 and view.eta_seconds == 60
    assert view.checkpoint_age(NOW) == 30


def test_eta_needs_a_step_time_or_throughput_and_is_not_told_for_a_finished_job():
    assert view_of(job(progress={"step": 5, "totalSteps": 100})).eta_seconds is None
    script = job()
    script["spec"]["trainer"] = {"command": ["python", "train.py"]}
    assert view_of(script).eta_seconds is None  # samples/s alone: the unit of its samples is unknown
    script["status"]["progress"]["stepSeconds"] = 0.5  # it reports its step time (disttrain.train)
    assert view_of(script).eta_seconds == 30
    assert view_of(job(phase="Succeeded")).eta_seconds is None
    fsdp = job()
    fsdp["spec"]["mesh"] = {"fsdp": 2, "tp": 2}  # data-parallel degree is the fsdp axis
    assert view_of(fsdp).global_batch == 8 * 2 * 2


def test_the_default_batch_size_is_the_apis():
    spec = job()
    del spec["spec"]["trainer"]["builtin"]["batchSize"]
    assert view_of(spec).global_batch == 8 * 4 * 2  # api/types.py: batchSize default 8


def test_a_fresh_object_without_status_is_pending_with_dashes():
    view = view_of({"metadata": {"name": "new"}, "spec": {}})
    assert view.phase is None and view.eta_seconds is None
    assert progress_line(view, NOW) == "new: Pending"
    assert f"  (none yet: {NO_OPERATOR})" in status_lines(view, [], NOW)


def test_a_job_no_operator_has_seen_names_where_to_look_and_how_to_install_it():
    """Issue 70: without an operator a job only waits; status and a wait that times out
    say so with the fix, where a job the operator wrote adds nothing."""
    from disttrain.client.jobview import unseen

    assert NO_OPERATOR == ("no operator has written its status: check it runs (kubectl get pods -n "
                           "disttrain-system), else install it (helm install disttrain charts/disttrain "
                           "-n disttrain-system --create-namespace)")
    assert unseen({"metadata": {"name": "new"}, "spec": {}}) == f": {NO_OPERATOR}"
    assert unseen({"metadata": {"name": "seen"}, "status": {"phase": "Pending"}}) == ""


@pytest.mark.parametrize("seconds,text", [(None, "-"), (0, "0s"), (119, "119s"), (125, "2m5s"), (600, "10m"),
                                          (3 * 3600 + 600, "3h10m"), (30 * 3600, "30h"), (3 * 86400, "3d"),
                                          (3 * 86400 + 7200, "3d2h"), (20 * 86400, "20d"), (-5, "0s")])
def test_durations_read_like_kubectl(seconds, text):
    assert duration(seconds) == text


def test_bar_fills_with_progress_and_clamps():
    assert bar(40, 100, width=10) == "[####------]  40%"
    assert bar(0, 100, width=4) == "[----]   0%"
    assert bar(150, 100, width=4) == "[####] 100%"
    assert bar(None, 100, width=4) == "[----]   -"
    assert bar(3, None, width=4) == "[----]   -"


def test_progress_line_has_step_bar_loss_rate_eta_and_checkpoint_age():
    line = progress_line(view_of(job()), NOW)
    assert line == ("gpt: Running  step 40/100 [########------------]  40%  loss 2.5  64.0 samples/s  ETA 60s  "
                    "checkpoint step 40 (30s ago)")


def test_status_says_where_the_newest_checkpoint_is():
    def checkpoint_line(obj: dict) -> str:
        return next(line for line in status_lines(view_of(obj), [], NOW) if line.startswith("Checkpoint:"))

    url = "s3://team-ckpt/gpt/step-00000040-9f2c41aa"
    assert checkpoint_line(job(checkpoint={"step": 40, "time": stamp(30), "path": url})) == (
        f"Checkpoint:  step 40 (30s ago) at {url}")
    on_claim = job(checkpoint={"step": 40, "time": stamp(30), "path": "/checkpoints/step-00000040"})
    on_claim["spec"]["checkpoint"] = {"claimName": "gpt-ckpt"}
    assert checkpoint_line(on_claim) == "Checkpoint:  step 40 (30s ago) on claim gpt-ckpt at /checkpoints/step-00000040"
    in_pod = job(checkpoint={"step": 40, "time": stamp(30), "path": "/checkpoints/step-00000040"})
    assert checkpoint_line(in_pod).endswith("at /checkpoints/step-00000040 (the pod's emptyDir)")
    assert checkpoint_line(job()) == "Checkpoint:  step 40 (30s ago)"  # no path reported yet


def test_status_lines_show_conditions_with_messages_and_newest_events_last():
    obj = job(conditions=[{"type": "Running", "status": "True", "reason": "WorkersRunning", "message": "2/2 ready"},
                          {"type": "CheckpointStale", "status": "False"}])
    events = [{"type": "Normal", "reason": "Created", "message": "pod gpt-worker-1\ncreated",
               "lastTimestamp": stamp(20)},
              {"type": "Warning", "reason": "Restarted", "message": "worker 0 failed", "count": 3,
               "lastTimestamp": stamp(5)},
              {"type": "Normal", "reason": "Validated", "message": "ok", "eventTime": stamp(700)}]
    lines = status_lines(view_of(obj), events, NOW)
    text = "\n".join(lines)
    assert "Phase:       Running" in text
    assert "Workers:     2 of 2 running; world size 4, restarts 1" in text
    assert "Progress:    [########------------]  40%  step 40/100" in text
    assert "ETA:         60s" in text and "Checkpoint:  step 40 (30s ago)" in text and "Age:         12m" in text
    assert "  Running=True WorkersRunning: 2/2 ready" in lines
    assert "  CheckpointStale=False" in lines
    tail = lines[lines.index("Events:") + 1:]
    assert [line.split()[2] for line in tail] == ["Validated:", "Created:", "Restarted"]
    assert tail[1].endswith("Created: pod gpt-worker-1 created")  # one line per event
    assert "(x3): worker 0 failed" in tail[2]


def test_status_shows_the_newest_eight_events_oldest_first():
    """docs/cli.md: Events are the newest eight, oldest first; with more, the latest (the
    failure a user is looking for) must be among them."""
    events = [{"type": "Normal", "reason": f"Step{i}", "message": f"event {i}", "lastTimestamp": stamp(100 - i)}
              for i in range(11)]
    events[10]["reason"] = "WorkerFailed"
    lines = status_lines(view_of(job()), list(reversed(events)), NOW)
    tail = lines[lines.index("Events:") + 1:]
    assert [line.split()[2].rstrip(":") for line in tail] == [f"Step{i}" for i in range(3, 10)] + ["WorkerFailed"]


def test_event_line_without_a_time():
    assert event_line({"type": "Normal", "reason": "X", "message": "m"}, NOW) == "     -  Normal  X: m"


def test_top_table_aligns_columns_sorts_and_names_namespaces_with_all():
    other = job(phase="Pending", progress={}, checkpoint=None, restarts=0)
    other["metadata"] = {"name": "a-first", "namespace": "zeta"}
    lines = top_table([view_of(job()), view_of(other)], NOW, all_namespaces=True)
    assert lines[0].split() == ["NAMESPACE", "NAME", "PHASE", "NODES", "WORLD", "STEP", "PROGRESS", "SAMPLES/S",
                                "CHECKPOINT", "RESTARTS", "AGE"]
    assert lines[1].split() == ["team", "gpt", "Running", "2/2", "4", "40/100", "[####------]", "40%", "64.0", "40",
                                "(30s", "ago)", "1", "12m"]
    assert lines[2].split()[:3] == ["zeta", "a-first", "Pending"]
    assert len({line.index("PHASE") if i == 0 else None for i, line in enumerate(lines)}) == 2
    assert lines[1].index("Running") == lines[0].index("PHASE")  # aligned
    assert top_table([], NOW) == []
    assert top_table([view_of(job())], NOW)[0].startswith("NAME ")


@pytest.mark.parametrize("phase,target,decision", [
    ("Running", "Running", MET), ("Pending", "Running", WAITING), ("Succeeded", "Running", NEVER),
    ("Failed", "Succeeded", NEVER), ("Running", "Succeeded", WAITING), ("Succeeded", "Succeeded", MET),
    ("Restarting", "Suspended", WAITING), (None, "Running", WAITING), ("Suspended", "Suspended", MET)])
def test_wait_decision(phase, target, decision):
    assert wait_decision(JobView(name="j", phase=phase), target) == decision


@pytest.mark.parametrize("text,seconds", [("90", 90), ("90s", 90), ("5m", 300), ("1h30m", 5400), ("0.5s", 0.5)])
def test_durations_parse_like_kubectl(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5 minutes", "m", "1d", "5m x"])
def test_bad_durations_name_the_fix(text):
    with pytest.raises(ValueError, match="use a number of seconds or units h, m, s, e.g. 90s, 5m, 1h30m"):
        parse_duration(text)


def test_a_typed_spec_becomes_the_same_object_as_its_yaml():
    spec = t.DistributedTrainingSpec(nodes=2, trainer=t.TrainerSpec(builtin=t.BuiltinTrainer(steps=50, batch_size=4)),
                                     checkpoint=t.Checkpoint(claim_name="ckpt", interval_steps=10),
                                     env=[t.EnvVar(name="A", value="1")])
    obj = manifest_of(spec, name="typed")
    assert obj == {"metadata": {"name": "typed"},
                   "spec": {"trainer": {"builtin": {"steps": 50, "batchSize": 4}},
                            "env": [{"name": "A", "value": "1"}], "nodes": 2,
                            "checkpoint": {"intervalSteps": 10, "claimName": "ckpt"}},
                   "apiVersion": "disttrain.dev/v1alpha1", "kind": "DistributedTraining"}
    assert validate_document(obj).ok


def test_manifest_of_a_dict_copies_and_completes_it():
    raw = {"metadata": {"name": "x"}, "spec": {"nodes": 1}}
    obj = manifest_of(raw)
    obj["spec"]["nodes"] = 3
    assert raw["spec"]["nodes"] == 1 and obj["kind"] == "DistributedTraining"
    with pytest.raises(TypeError, match="a job is a dict or a DistributedTrainingSpec, not str"):
        manifest_of("x.yaml")  # type: ignore[arg-type]


def test_the_python_client_imports_without_torch_or_kopf():
    """A notebook without torch: `from disttrain import Client` must not pull either in."""
    code = ("import sys; sys.modules['torch'] = None; sys.modules['kopf'] = None\n"
            "from disttrain import Client, JobView, DistributedTrainingSpec\n"
            "import disttrain.cli.main\n"
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": f"{ROOT}/operator", "PATH": "/usr/bin:/bin"})
    assert out.stdout.strip() == "ok", out.stderr


def test_help_lists_every_command_with_an_example_under_both_names(tmp_path):
    from disttrain.cli.main import COMMANDS

    for argv0 in ("disttrain", "kubectl-disttrain"):
        out = subprocess.run([sys.executable, "-c", "import sys; from disttrain.cli.main import main; "
                              f"sys.argv[0] = {argv0!r}; sys.exit(main(['--help']))"],
                             capture_output=True, text=True, timeout=60, env={"PYTHONPATH": f"{ROOT}/operator"})
        assert out.returncode == 0, out.stderr
        prog = "kubectl disttrain" if argv0.startswith("kubectl") else "disttrain"
        assert out.stdout.startswith(f"usage: {prog} ")
        for command in COMMANDS:
            assert f"  {prog} {command.example}" in out.stdout, command.name
    names = {c.name for c in COMMANDS}
    assert {"submit", "get", "status", "logs", "wait", "suspend", "resume", "delete", "top"} <= names


def test_wait_rejects_a_bad_timeout_as_a_usage_error():
    out = subprocess.run([sys.executable, "-m", "disttrain.cli", "wait", "x", "--timeout", "soon"],
                         capture_output=True, text=True, timeout=60, env={"PYTHONPATH": f"{ROOT}/operator"})
    assert out.returncode == 2
    assert out.stderr == ("error: --timeout: invalid duration 'soon': use a number of seconds or units h, m, s, "
                          "e.g. 90s, 5m, 1h30m\n")


def test_shell_completion_offers_commands_and_options_and_no_names_without_a_cluster(tmp_path):
    """argcomplete's protocol, as bash's `complete` drives it: candidates on fd 8."""
    def complete(line: str) -> list[str]:
        env = {"PYTHONPATH": f"{ROOT}/operator", "_ARGCOMPLETE": "1", "_ARGCOMPLETE_IFS": "\n",
               "COMP_LINE": line, "COMP_POINT": str(len(line)), "KUBECONFIG": str(tmp_path / "none"),
               "PATH": "/usr/bin:/bin"}
        out = subprocess.run(["bash", "-c", '"$0" -m disttrain.cli 8>&1 9>/dev/null', sys.executable],
                             env=env, timeout=60, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return sorted(out.stdout.split())

    assert complete("disttrain s") == ["status", "submit", "suspend", "sweep"]
    assert complete("disttrain wait x --f") == ["--for"]
    assert complete("disttrain status g") == []  # job names come from the cluster; none is reachable


def test_kubectl_completion_in_process_quotes_the_word_and_leaves_the_environment_as_it_was(monkeypatch, tmp_path):
    """kubectl_complete drives argcomplete through the environment (COMP_LINE, COMP_POINT,
    _ARGCOMPLETE, _ARGCOMPLETE_IFS) and puts every one back as it found it, set or not: a
    process that calls it goes on with its own. A word the shell would split or expand is
    quoted into COMP_LINE; the directive says "no space" after a word that goes on."""
    import contextlib
    import io
    import os

    from disttrain.cli.completion import kubectl_complete

    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    # (argcomplete ends the process once it has answered unless told otherwise, with the
    # os._exit it bound on import: no patch here can catch that. The process-level
    # test_kubectl_completes_the_plugin_through_kubectl_complete_disttrain does: no candidates.)
    monkeypatch.setenv("COMP_LINE", "the caller's")
    monkeypatch.delenv("COMP_POINT", raising=False)
    monkeypatch.delenv("_ARGCOMPLETE", raising=False)
    monkeypatch.delenv("_ARGCOMPLETE_IFS", raising=False)

    def complete(*words: str) -> list[str]:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert kubectl_complete(list(words)) == 0
        return out.getvalue().split("\n")[:-1]  # kubectl reads lines ending in "\n", nothing else

    assert sorted(complete("s")[:-1]) == ["status", "submit", "suspend", "sweep"] and complete("s")[-1] == ":4"
    assert complete("get", "-o", "js") == ["json", "jsonpath=", ":6"]  # jsonpath= goes on: no space
    assert complete("get", "-o", "c") == ["custom-columns=", ":6"]
    assert sorted(complete("wait", "x", "--for", "")) == [
        ":6", "Running", "Succeeded", "Suspended", "condition=", "delete", "jsonpath="]
    assert complete("render", "--output", "y") == ["yaml", ":4"]
    assert complete() == complete("")  # nothing typed yet: every command
    # The word is one word even where a shell would split it: " y" offers nothing, not "yaml".
    assert complete("render", "--output", " y") == [":4"]
    assert complete("status", "it's") == [":4"]  # quoted, not a broken COMP_LINE; no such job
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "a.yaml").write_text("")
    (tmp_path / "jobs" / "INDEX").write_text("")
    (tmp_path / "jobs" / "my job.yaml").write_text("")
    assert complete("submit", "-f", f"{tmp_path}/jo") == [f"{tmp_path}/jobs/", ":6"]  # a folder goes on
    (tmp_path / "jo-a.yaml").write_text("")
    (tmp_path / "joz.yaml").write_text("")
    among = complete("submit", "-f", f"{tmp_path}/jo")  # a folder among files: still no space
    assert sorted(among[:-1]) == [f"{tmp_path}/jo-a.yaml", f"{tmp_path}/jobs/", f"{tmp_path}/joz.yaml"]
    assert among[-1] == ":6", among
    files = complete("validate", f"{tmp_path}/jobs/")  # one a line, a name with a space one too
    assert sorted(files[:-1]) == [f"{tmp_path}/jobs/INDEX", f"{tmp_path}/jobs/a.yaml",
                                  f"{tmp_path}/jobs/my\\ job.yaml"] and files[-1] == ":4", files
    assert os.environ["COMP_LINE"] == "the caller's"
    assert not {"COMP_POINT", "_ARGCOMPLETE", "_ARGCOMPLETE_IFS"} & set(os.environ)


def test_every_command_that_takes_a_job_name_completes_the_names_the_cluster_has(monkeypatch):
    """NAME<TAB> offers the jobs of the namespace, through the same parser kubectl and the
    shell complete from: for the commands that take one NAME and for those that take several
    (suspend, resume, delete), after a name already given too. (The listing is a stand-in
    Client: which names a real cluster gives is the client's test.)"""
    import contextlib
    import io

    from disttrain.client import client
    from disttrain.cli.completion import kubectl_complete

    class Listing:
        def __init__(self, *args, **kwargs):
            pass

        def list(self):
            return [{"metadata": {"name": name}} for name in ("train-a", "train-b", "eval")]

    monkeypatch.setattr(client, "Client", Listing)

    def complete(*words: str) -> list[str]:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert kubectl_complete(list(words)) == 0
        return sorted(out.getvalue().split("\n")[:-1])

    for command in ("get", "status", "logs", "wait", "suspend", "resume", "delete"):
        assert complete(command, "train-") == [":4", "train-a", "train-b"], command
    assert complete("delete", "eval", "train-") == [":4", "train-a", "train-b"]


def waiting_client(*versions: str | dict):
    """A Client whose watch yields the job in these versions (a phase, or a whole object),
    one each, then ends as if deleted (no cluster: Client.wait's decisions are what is
    tested here; the watch runs in tests/cluster)."""
    from disttrain.client.client import Client

    def objects(name, ns, deadline, until_deleted=False):
        for v in versions:
            yield v if isinstance(v, dict) else {"metadata": {"name": name}, "status": {"phase": v}}

    client = Client.__new__(Client)
    client.namespace = "default"
    client._watch_one = objects
    return client


def test_wait_for_one_of_several_phases_and_see_each_change():
    from disttrain.client.errors import JobFailed

    seen = []
    view = waiting_client("Pending", "Running", "Succeeded").wait("j", ("Succeeded", "Suspended"),
                                                                  on_change=lambda v: seen.append(v.phase))
    assert view.phase == "Succeeded" and seen == ["Pending", "Running", "Succeeded"]
    assert waiting_client("Pending", "Suspended").wait("j", ["Succeeded", "Suspended"]).phase == "Suspended"
    # Failed can reach neither: the wait ends at once, naming both.
    with pytest.raises(JobFailed, match="it will never be Succeeded or Suspended"):
        waiting_client("Running", "Failed", "Succeeded").wait("j", ("Succeeded", "Suspended"))


@pytest.mark.parametrize("phase", ["Done", ("Running", "Done"), ()])
def test_a_phase_that_cannot_be_waited_for_is_a_disttrain_error(phase):
    from disttrain.client.errors import DisttrainError, InvalidArgument

    with pytest.raises(InvalidArgument) as err:
        waiting_client("Running").wait("j", phase)
    assert isinstance(err.value, DisttrainError) and isinstance(err.value, ValueError)
    assert "cannot be waited for; allowed: Running, Succeeded, Suspended" in str(err.value)


def test_the_list_without_headers_and_wide():
    now = datetime(2026, 11, 24, 12, 0, tzinfo=timezone.utc)
    views = [JobView(name="a", phase="Running", world_size=8, nodes=2, desired=2, step=10, total_steps=100,
                     loss=2.5, samples_per_second=100.0, global_batch=10)]
    plain = top_table(views, now)
    assert top_table(views, now, headers=False) == plain[1:]
    wide = top_table(views, now, wide=True)
    assert wide[0].split()[-2:] == ["STRATEGY", "LOSS"]  # as kubectl get -o wide
    assert wide[1].split()[-2:] == ["-", "2.5"]
    assert top_table([], now, wide=True) == []


def test_wait_for_conditions_jsonpath_and_delete_like_kubectl():
    from disttrain.client.errors import InvalidArgument

    def job(phase, **status):
        return {"metadata": {"name": "j"}, "status": {"phase": phase, **status}}

    stale = job("Running", conditions=[{"type": "CheckpointStale", "status": "True"}])
    fresh = job("Running", conditions=[{"type": "CheckpointStale", "status": "False"}])
    assert waiting_client(fresh, stale).wait_for("j", "condition=checkpointstale").phase == "Running"
    assert waiting_client(stale, fresh).wait_for("j", "condition=CheckpointStale=false") is not None
    at_step = job("Running", progress={"step": 40})
    assert waiting_client(job("Running"), at_step).wait_for("j", "jsonpath={.status.progress.step}=40").phase
    assert waiting_client(job("Pending"), at_step).wait_for("j", "jsonpath={.status.progress}") is not None
    assert waiting_client("Running", "Succeeded").wait_for("j", "delete") is None  # the watch ended: gone
    # A phase it can no longer reach ends the wait; a condition waits on (until the timeout).
    from disttrain.client.errors import JobFailed
    with pytest.raises(JobFailed):
        waiting_client("Failed").wait_for("j", "Running,Suspended")
    with pytest.raises(AssertionError, match="unreachable"):  # the stub's watch ends; a real one would not
        waiting_client("Failed").wait_for("j", "condition=Running")
    with pytest.raises(InvalidArgument, match="condition=TYPE"):
        waiting_client("Running").wait_for("j", "ready")


@pytest.mark.parametrize("text, complaint", [
    ("condition=", "name the condition"), ("Done", "'Done' is not a phase"),
    ("jsonpath={.status", "not closed"), ("jsonpath={.a}x", "=VALUE or nothing"),
    ("phase=Running", "'phase=Running' is not a phase"),
])
def test_a_wait_target_that_cannot_be_read_names_the_forms(text, complaint):
    from disttrain.client.waiting import parse_wait_for

    with pytest.raises(ValueError) as err:
        parse_wait_for(text)
    assert complaint in str(err.value)


def test_status_lists_the_nodes_the_job_avoids_and_those_it_stopped_avoiding():
    from datetime import datetime, timezone

    from disttrain.client.jobview import status_lines, view_of

    obj = {"metadata": {"name": "j", "namespace": "n"}, "status": {"phase": "Running", "avoidedNodes": [
        {"node": "gpu-7", "time": "2026-11-25T10:00:00Z", "failures": 2},
        {"node": "gpu-3", "time": "2026-11-25T09:00:00Z", "failures": 3, "liftedTime": "2026-11-25T09:05:00Z",
         "message": "j-worker-1 cannot be scheduled while avoiding gpu-3: no nodes"}]}}
    lines = status_lines(view_of(obj), [], datetime(2026, 11, 25, 11, tzinfo=timezone.utc))
    start = lines.index("Avoided nodes:")
    assert lines[start + 1:start + 3] == [
        "  gpu-7: 2 failures, avoided since 2026-11-25T10:00:00Z",
        "  gpu-3: 3 failures, avoided since 2026-11-25T09:00:00Z; no more since 2026-11-25T09:05:00Z: "
        "j-worker-1 cannot be scheduled while avoiding gpu-3: no nodes"]
    assert lines[start + 3] == "Events:"


def test_status_counts_the_running_workers_and_the_world_size_they_make():
    """One of three workers unschedulable (issue 70): the worker count and the world size
    say what runs, as the Running condition does, and what is desired."""
    obj = job(resolved={"worldSize": 24, "nprocPerNode": 8}, workers={"active": 3, "running": 2, "desired": 3},
              conditions=[{"type": "Running", "status": "True", "reason": "PodsRunning",
                           "message": "2 of 3 workers running (minNodes 2)"}])
    lines = status_lines(view_of(obj), [], NOW)
    assert "Workers:     2 of 3 running, 1 pending; world size 16 of 24, restarts 1" in lines
    assert top_table([view_of(obj)], NOW)[1].split()[2] == "2/3"  # NODES (kubectl get dt's too): running of desired
    suspended = job(phase="Suspended", resolved={"worldSize": 24, "nprocPerNode": 8},
                    workers={"active": 0, "running": 0, "desired": 0})
    assert "Workers:     0 of 0 running; world size 0 of 24, restarts 1" in status_lines(view_of(suspended), [], NOW)


def test_goodput_without_a_measured_step_is_unknown():
    """Pods that never trained (KWOK), or a script that reports no step (issue 70): no
    percentage and no productive time, only where the time went that was measured."""
    unmeasured = {"lostSeconds": 0.0, "restartingSeconds": 28.0, "waitingSeconds": 4.0,
                  "updateTime": "2026-11-25T10:00:00Z"}
    lines = status_lines(view_of(job(goodput=unmeasured)), [], NOW)
    assert "Goodput:     unknown: no step reported yet (unmeasured 28s, lost 0s, waiting 4s)" in lines
    # What an older operator wrote without a step (ratio 1.0) is no measurement either.
    older = {**unmeasured, "ratio": 1.0, "productiveSeconds": 28.0, "restartingSeconds": 0.0}
    assert "Goodput:     unknown: no step reported yet (unmeasured 28s, lost 0s, waiting 4s)" in status_lines(
        view_of(job(goodput=older)), [], NOW)


def test_status_says_where_the_worker_time_went():
    from datetime import datetime, timezone

    from disttrain.client.jobview import status_lines, view_of

    obj = {"metadata": {"name": "j", "namespace": "n"}, "status": {"phase": "Running", "goodput": {
        "ratio": 0.85, "productiveSeconds": 850.0, "lostSeconds": 150.0, "restartingSeconds": 0.0,
        "waitingSeconds": 12.0, "step": 1700, "updateTime": "2026-11-25T10:00:00Z"}}}
    lines = status_lines(view_of(obj), [], datetime(2026, 11, 25, 11, tzinfo=timezone.utc))
    assert "Goodput:     85% of worker time (productive 14m, lost 2m30s, restarting 0s, waiting 12s)" in lines
    assert not any(line.startswith("Goodput:") for line in status_lines(
        view_of({"metadata": {"name": "j"}, "status": {}}), [], datetime(2026, 11, 25, 11, tzinfo=timezone.utc)))


def test_a_job_waiting_in_its_kueue_queue_shows_as_queued():
    waiting = {"type": "Queued", "status": "True", "reason": "Pending",
               "message": "waiting in LocalQueue team: couldn't assign flavors to pod set workers: insufficient "
                          "unused quota for nvidia.com/gpu in flavor default, 8 more needed"}
    queued = view_of(job(phase="Pending", progress={}, checkpoint=None, conditions=[waiting]))
    assert top_table([queued], NOW)[1].split()[:2] == ["gpt", "Queued"]
    lines = status_lines(queued, [], NOW)
    assert lines[2] == "Phase:       Pending (queued: waiting for Kueue's admission, see Queued below)"
    assert any(line.startswith("  Queued=True Pending: waiting in LocalQueue team") and "8 more needed" in line
               for line in lines)
    admitted = view_of(job(conditions=[{**waiting, "status": "False", "reason": "Admitted"}]))
    assert top_table([admitted], NOW)[1].split()[1] == "Running"


def test_status_shows_the_latest_evaluation_with_the_metrics_your_code_named():
    def eval_line(progress: dict) -> list[str]:
        obj = job(progress={"step": 40, "totalSteps": 100, **progress})
        return [line for line in status_lines(view_of(obj), [], NOW) if line.startswith("Eval:")]
    assert eval_line({}) == []  # not evaluated yet
    assert eval_line({"evalStep": 40, "evalLoss": 0.51234567, "evalMetrics": {"val/f1": 0.8, "accuracy": 0.9125}}) == [
        "Eval:        step 40: loss 0.512346, accuracy 0.9125, val/f1 0.8"]
    assert eval_line({"evalStep": 30, "evalMetrics": {"accuracy": 1.0}}) == ["Eval:        step 30: accuracy 1"]


def test_status_names_the_template_the_job_keeps():
    from disttrain.client.jobview import status_lines, view_of

    obj = {"metadata": {"name": "j", "namespace": "n"}, "status": {"phase": "Running", "template": {
        "kind": "ClusterTrainingTemplate", "name": "gpu-8x", "uid": "u", "generation": 3}}}
    lines = status_lines(view_of(obj), [], NOW)
    assert lines[2] == ("Template:    ClusterTrainingTemplate gpu-8x, generation 3 (its defaults < this job's spec "
                        "< its enforced settings)")
    assert not any(line.startswith("Template:") for line in status_lines(view_of({"metadata": {"name": "j"}}), [], NOW))


def test_get_shows_the_columns_kubectl_get_shows_in_the_same_order():
    """Issue 70: `kubectl get dt` (the CRD's printer columns) and `disttrain get` name the
    same columns in the same order, plain and -o wide."""
    from disttrain.api import schema

    printer = schema.crd()["spec"]["versions"][0]["additionalPrinterColumns"]
    plain = ["NAME"] + [c["name"].upper() for c in printer if not c.get("priority")]
    wide = ["NAME"] + [c["name"].upper() for c in printer]
    views = [view_of(job())]
    assert top_table(views, NOW)[0].split() == plain
    assert top_table(views, NOW, wide=True)[0].split() == wide
    assert plain == ["NAME", "PHASE", "NODES", "WORLD", "STEP", "PROGRESS", "SAMPLES/S", "CHECKPOINT", "RESTARTS",
                     "AGE"]
    assert wide[len(plain):] == ["STRATEGY", "LOSS"]


def test_scaling_a_fixed_size_job_warns_that_its_workers_are_re_created():
    """Issue 70: a new spec.nodes on a fixed-size job changes every worker's rendezvous
    range (PET_NNODES n:n), so the operator replaces them all; apply says so. An elastic
    job grows and shrinks in place; a job with no workers yet has nothing to replace."""
    from disttrain.client.jobview import resize_warning

    def obj(nodes, phase="Running", **elastic):
        return {"metadata": {"name": "gpt"}, "spec": {"nodes": nodes, **elastic}, "status": {"phase": phase}}

    assert resize_warning(obj(2), obj(4)) == (
        "Warning: gpt: spec.nodes 2 -> 4 on a fixed-size job: the operator re-creates all its workers and "
        "training resumes from the newest checkpoint (set minNodes and maxNodes to scale in place)")
    assert resize_warning(obj(2, minNodes=1, maxNodes=4), obj(4, minNodes=1, maxNodes=4)) is None
    assert resize_warning(obj(2), obj(2)) is None
    assert resize_warning(obj(2, phase="Suspended"), obj(4, phase="Suspended")) is None
    assert resize_warning(None, obj(4)) is None

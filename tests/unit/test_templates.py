"""Training templates resolved offline (api/template_resolution.py): the template's defaults < the
job's own spec < the template's enforced settings, at every kind of field (a scalar, a
mapping, a list merged on its keys, a list that is one value, a pod spec), and the
refusals' words pinned in tests/unit/golden/template_messages.json (after an intended
change: DISTTRAIN_UPDATE_GOLDEN=1 pytest this file, then read the diff)."""

from __future__ import annotations

import copy

import pytest
from disttrain.api import types as t
from disttrain.api.template_resolution import (CLUSTER_TEMPLATE_KIND, DEFAULT, ENFORCED, JOB, check_template,
                                               parse_template, resolve)

from .golden import Golden

GOLDEN = Golden("template_messages")


def template(defaults=None, enforced=None, kind=CLUSTER_TEMPLATE_KIND, contact="#ml-platform", **spec):
    return {"apiVersion": t.API_VERSION, "kind": kind, "metadata": {"name": "gpu-8x"},
            "spec": {"contact": contact, "defaults": defaults or {}, "enforced": enforced or {}, **spec}}


def job(**spec):
    return {"apiVersion": t.API_VERSION, "kind": t.KIND, "metadata": {"name": "train"}, "spec": spec}


def resolved(tpl, doc):
    parsed, errors = parse_template(tpl)
    assert errors == []
    return resolve(parsed, doc)


def test_a_scalar_default_gives_way_to_the_job_and_an_enforced_one_to_nothing():
    tpl = template(defaults={"image": "team/train:1", "gpusPerNode": 8}, enforced={"maxRestarts": 2})
    r = resolved(tpl, job(gpusPerNode=4))
    assert (r.doc["spec"]["image"], r.doc["spec"]["gpusPerNode"], r.doc["spec"]["maxRestarts"]) == ("team/train:1", 4, 2)
    assert r.sources == {"spec.gpusPerNode": JOB, "spec.image": DEFAULT, "spec.maxRestarts": ENFORCED}
    assert resolved(tpl, job(maxRestarts=2)).errors == []  # the same value is no contradiction
    (error,) = resolved(tpl, job(maxRestarts=5)).errors
    assert (error.path, error.value) == ("spec.maxRestarts", 5)


def test_mappings_merge_key_by_key():
    tpl = template(defaults={"resources": {"requests": {"cpu": "8", "memory": "64Gi"}}},
                   enforced={"scheduling": {"nodeSelector": {"pool": "a100"}}})
    r = resolved(tpl, job(resources={"requests": {"cpu": "16"}}, scheduling={"nodeSelector": {"zone": "b"}}))
    assert r.doc["spec"]["resources"] == {"requests": {"cpu": "16", "memory": "64Gi"}}
    assert r.doc["spec"]["scheduling"]["nodeSelector"] == {"zone": "b", "pool": "a100"}  # the job may add keys
    assert [e.path for e in resolved(tpl, job(scheduling={"nodeSelector": {"pool": "h100"}})).errors] == [
        "spec.scheduling.nodeSelector.pool"]


def test_lists_with_keys_merge_item_by_item_and_only_enforced_items_are_the_templates():
    tpl = template(defaults={"env": [{"name": "NCCL_DEBUG", "value": "WARN"}, {"name": "HF_HOME", "value": "/data"}]},
                   enforced={"env": [{"name": "NCCL_IB_HCA", "value": "mlx5"}]})
    r = resolved(tpl, job(env=[{"name": "NCCL_DEBUG", "value": "INFO"}, {"name": "MINE", "value": "1"}]))
    assert r.doc["spec"]["env"] == [{"name": "NCCL_DEBUG", "value": "INFO"}, {"name": "HF_HOME", "value": "/data"},
                                    {"name": "MINE", "value": "1"}, {"name": "NCCL_IB_HCA", "value": "mlx5"}]
    assert {p: s for p, s in r.sources.items() if p.startswith("spec.env")} == {
        "spec.env[HF_HOME].value": DEFAULT, "spec.env[MINE].value": JOB, "spec.env[NCCL_DEBUG].value": JOB,
        "spec.env[NCCL_IB_HCA].value": ENFORCED}
    (error,) = resolved(tpl, job(env=[{"name": "NCCL_IB_HCA", "value": "mlx4"}])).errors
    assert (error.path, error.value) == ("spec.env[NCCL_IB_HCA]", {"name": "NCCL_IB_HCA", "value": "mlx4"})
    # An item is one value (an env var has one source): the job's replaces the default's whole.
    secret = template(defaults={"env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]})
    assert resolved(secret, job(env=[{"name": "TOKEN", "value": "plain"}])).doc["spec"]["env"] == [
        {"name": "TOKEN", "value": "plain"}]


def test_a_list_without_keys_is_one_value():
    toleration = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    mine = {"key": "team", "operator": "Equal", "value": "a", "effect": "NoSchedule"}
    defaults = template(defaults={"scheduling": {"tolerations": [toleration]}})
    assert resolved(defaults, job(scheduling={"tolerations": [mine]})).doc["spec"]["scheduling"]["tolerations"] == [mine]
    enforced = template(enforced={"scheduling": {"tolerations": [toleration]}})
    assert resolved(enforced, job()).doc["spec"]["scheduling"]["tolerations"] == [toleration]
    assert [e.path for e in resolved(enforced, job(scheduling={"tolerations": [mine]})).errors] == [
        "spec.scheduling.tolerations"]


def test_a_pod_spec_merges_containers_volumes_and_mounts_on_their_keys():
    shm = {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}}
    mount = {"name": "shm", "mountPath": "/dev/shm"}
    tpl = template(enforced={"podTemplate": {"spec": {"volumes": [shm], "containers": [
        {"name": "trainer", "volumeMounts": [mount]}]}}},
        defaults={"podTemplate": {"metadata": {"labels": {"team": "vision"}}}})
    data = {"name": "data", "persistentVolumeClaim": {"claimName": "datasets"}}
    own = job(podTemplate={"metadata": {"labels": {"run": "7"}}, "spec": {"volumes": [data], "containers": [
        {"name": "trainer", "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}})
    pod = resolved(tpl, own).doc["spec"]["podTemplate"]
    assert pod["metadata"]["labels"] == {"team": "vision", "run": "7"}
    assert pod["spec"]["volumes"] == [data, shm]
    assert pod["spec"]["containers"] == [{"name": "trainer", "volumeMounts": [
        {"name": "data", "mountPath": "/data"}, mount]}]
    clash = job(podTemplate={"spec": {"volumes": [{"name": "shm", "emptyDir": {"sizeLimit": "1Gi"}}]}})
    assert [e.path for e in resolved(tpl, clash).errors] == ["spec.podTemplate.spec.volumes[shm]"]


def test_a_job_of_the_wrong_shape_is_refused_not_dropped_and_never_a_traceback():
    tpl = template(defaults={"env": [{"name": "A", "value": "1"}]},
                   enforced={"resources": {"limits": {"memory": "4Gi"}}, "scheduling": {"nodeSelector": {"a": "b"}}})
    r = resolved(tpl, job(resources="lots", env=[{"name": ["x"], "value": "1"}]))
    assert [e.path for e in r.errors] == ["spec.resources"]
    assert {"name": ["x"], "value": "1"} in r.doc["spec"]["env"]  # left for the job's own validation to name


def test_resolution_changes_neither_the_job_nor_the_template():
    tpl, doc = template(defaults={"env": [{"name": "A", "value": "1"}]}), job(env=[{"name": "B", "value": "2"}])
    before = copy.deepcopy((tpl, doc))
    resolved(tpl, doc)
    assert (tpl, doc) == before


def test_a_template_grants_nothing_a_job_could_not_have():
    """The same pod policy as a job's: a hostPath volume is refused in a template too."""
    tpl, errors = parse_template(template(enforced={"podTemplate": {"spec": {"volumes": [
        {"name": "host", "hostPath": {"path": "/"}}]}}}))
    assert errors == [] and any("hostPath" in str(e) for e in check_template(tpl))


BAD_TEMPLATES = {
    "an enforced value the job contradicts": None,
    "a suspend in a template": template(defaults={"suspend": True}),
    "an unknown field of a template": template(overrides={"image": "x"}),
    "an unknown field of its defaults": template(defaults={"gpuPerNode": 8}),
    "a bound of the job's schema": template(enforced={"gpusPerNode": 99}),
    "not a template kind": template(kind="TrainingRuntime"),
}


def messages() -> dict[str, list[str]]:
    out = {}
    for case, doc in BAD_TEMPLATES.items():
        if doc is None:
            out[case] = [str(e) for e in resolved(template(enforced={"scheduling": {"priorityClassName": "batch"}}),
                                                  job(scheduling={"priorityClassName": "urgent"})).errors]
        else:
            out[case] = [str(e) for e in parse_template(doc)[1]]
    return out


def test_the_refusals_word_for_word():
    GOLDEN.update_or_check_keys(messages, {"": BAD_TEMPLATES})
    for case, lines in messages().items():
        assert lines and lines == GOLDEN.want(case), case


@pytest.mark.parametrize("contact, who", [("#ml-platform", "ask #ml-platform"),
                                          ("", "ask the platform team that owns the template")])
def test_a_refusal_says_whom_to_ask(contact, who):
    tpl = template(enforced={"maxRestarts": 2}, contact=contact)
    (error,) = resolved(tpl, job(maxRestarts=5)).errors
    assert who in str(error) and "ClusterTrainingTemplate gpu-8x" in str(error)


def test_validate_and_render_resolve_against_a_template_file(tmp_path):
    """`validate --template` says where each setting came from and refuses what the
    template enforces (exit 1); `render --template` renders the resolved job."""
    import json as _json

    import yaml

    from .helpers import disttrain

    tpl = tmp_path / "template.yaml"
    tpl.write_text(yaml.safe_dump(template(defaults={"env": [{"name": "OMP_NUM_THREADS", "value": "1"}]},
                                           enforced={"scheduling": {"priorityClassName": "batch"}})))
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(yaml.safe_dump(job(nodes=2, checkpoint={"claimName": "ckpt"})))
    bad.write_text(yaml.safe_dump(job(scheduling={"priorityClassName": "urgent"})))
    checked = disttrain("validate", "--template", str(tpl), str(good), "-o", "json")
    assert checked.returncode == 0, checked.stderr
    (entry,) = _json.loads(checked.stdout)
    assert entry["template"]["sources"] == {"spec.checkpoint.claimName": "job", "spec.env[OMP_NUM_THREADS].value":
                                            "template default", "spec.nodes": "job",
                                            "spec.scheduling.priorityClassName": "enforced"}
    refused = disttrain("validate", "--template", str(tpl), str(bad))
    assert refused.returncode == 1 and "is enforced by ClusterTrainingTemplate gpu-8x" in refused.stdout
    rendered = disttrain("render", "--template", str(tpl), str(good))
    assert rendered.returncode == 0, rendered.stderr
    pods = [o for o in yaml.safe_load_all(rendered.stdout) if o["kind"] == "Pod"]
    assert [p["spec"]["priorityClassName"] for p in pods] == ["batch", "batch"]
    assert all({"name": "OMP_NUM_THREADS", "value": "1"} in p["spec"]["containers"][0]["env"] for p in pods)
    # A file that holds no template, or a wrong one, is named before any job is read.
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(yaml.safe_dump(template(enforced={"gpusPerNode": 99})))
    for path, said in ((good, "--template takes a file with one TrainingTemplate or ClusterTrainingTemplate"),
                       (wrong, "the template is invalid")):
        failed = disttrain("render", "--template", str(path), str(good))
        assert failed.returncode == 1 and said in failed.stderr and failed.stdout == "", failed.stderr


def test_a_job_keeps_the_template_it_was_resolved_against_while_its_ref_names_it():
    """choose(): the kept copy (status.template) wins over the live template, deleted or
    edited; a templateRef naming another template takes the live one; none named: the
    namespace's TrainingTemplate `default`, if there is one; a name with no template is a
    FieldError naming the kind."""
    from disttrain.api.template_resolution import TEMPLATE_KIND, choose, snapshot

    live_templates = {}

    def live(kind, namespace, name):
        return live_templates.get((kind, namespace, name))

    first, _ = parse_template(template(defaults={"image": "team/train:1"}))
    kept = snapshot(first, "2026-12-07T00:00:00Z")
    assert (kept.defaults, kept.resolve_time, kept.contact) == ({"image": "team/train:1"}, "2026-12-07T00:00:00Z",
                                                                "#ml-platform")
    chosen, problem = choose({"name": "gpu-8x"}, "team-a", kept, live)  # deleted since: the copy still serves
    assert problem is None and chosen.defaults == {"image": "team/train:1"}
    live_templates[("ClusterTrainingTemplate", None, "other")] = first
    assert choose({"name": "other"}, "team-a", kept, live) == (first, None)
    missing, problem = choose({"name": "nope"}, "team-a", None, live)
    assert missing is None and str(problem).startswith("spec.templateRef.name: names no ClusterTrainingTemplate")
    local, problem = choose({"kind": TEMPLATE_KIND, "name": "nope"}, "team-a", None, live)
    assert "names no TrainingTemplate in namespace team-a" in str(problem)
    assert choose(None, "team-a", None, live) == (None, None)  # no default there: no template
    live_templates[(TEMPLATE_KIND, "team-a", "default")] = first
    assert choose(None, "team-a", None, live) == (first, None)


def test_the_ten_line_example_is_the_cpu_example_through_the_shipped_template():
    """manifests/examples/cpu-from-template.yaml resolved against the chart's example
    template `cpu` trains what manifests/examples/cpu-ddp-2x1.yaml trains."""
    import yaml

    from disttrain.api import validate_document

    from .conftest import ROOT

    def text(*parts):
        with open("/".join([ROOT, *parts])) as handle:
            return handle.read()

    def load(*parts):
        return yaml.safe_load(text(*parts))

    short = load("manifests", "examples", "cpu-from-template.yaml")
    lines = text("manifests", "examples", "cpu-from-template.yaml").splitlines()
    assert len([line for line in lines if not line.startswith("#")]) == 10
    cpu, errors = parse_template(load("charts", "disttrain", "examples", "templates", "cpu.yaml"))
    assert errors == [] and check_template(cpu) == []
    through = validate_document(resolve(cpu, short).doc)
    shipped = validate_document(load("manifests", "examples", "cpu-ddp-2x1.yaml"))
    assert through.ok and shipped.ok
    assert through.resolved == shipped.resolved
    mine, theirs = through.job.spec, shipped.job.spec
    assert (mine.resources, mine.trainer.builtin.steps, mine.checkpoint.claim_name, mine.checkpoint.interval_steps) == (
        theirs.resources, theirs.trainer.builtin.steps, theirs.checkpoint.claim_name, theirs.checkpoint.interval_steps)


def test_a_job_naming_a_template_checked_without_it_is_warned_only_about_what_it_sets():
    """Without --template the template's values are unknown (issue 70): the example names
    `cpu`, whose intervalSteps 20 the operator would apply; the offline check must not warn
    about the 100 its own defaulting put there, nor about a claim or trainer the template
    may set, and says that it cannot know them."""
    from .conftest import ROOT
    from .helpers import disttrain

    checked = disttrain("validate", f"{ROOT}/manifests/examples/cpu-from-template.yaml")
    assert checked.returncode == 0, checked.stderr
    warnings = [line for line in checked.stdout.splitlines() if " warning " in line]
    assert len(warnings) == 1, checked.stdout
    assert ("warning [TemplateNotResolved] spec.templateRef: names ClusterTrainingTemplate cpu, whose values "
            "are unknown offline: warned only about what this file sets") in warnings[0]
    assert "Fix: pass --template FILE" in warnings[0]


def test_without_the_template_only_warnings_about_fields_the_file_sets_are_kept():
    from disttrain.api.errors import GuardrailWarning
    from disttrain.api.template_resolution import without_template

    said = [GuardrailWarning("CheckpointIntervalBeyondSteps", "spec.checkpoint.intervalSteps", "100 > 60"),
            GuardrailWarning("FSDPSingleDevice", "spec.strategy", "one device"),
            GuardrailWarning("ReservedLooking", "spec.env[1].name", "a name")]
    doc = job(strategy="fsdp", env=[{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
              templateRef={"name": "cpu"})
    note, *kept = without_template(doc, said)
    assert [w.reason for w in kept] == ["FSDPSingleDevice", "ReservedLooking"]
    assert note.reason == "TemplateNotResolved" and "1 warning about a value the template may set left out" in note.message
    plain = job(strategy="fsdp")  # names no template: every warning stays, no note
    assert without_template(plain, said) == said

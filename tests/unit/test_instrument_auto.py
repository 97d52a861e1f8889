"""trainer.instrument: auto, the operator's side: what the worker pod gets (an init
container from instrumentImage copying disttrain's package into an emptyDir, PYTHONPATH
starting with its start-up folder, before the job's own), what is refused, that jobs made
before the field keep their template hash, and the Instrumented condition."""

from __future__ import annotations

from disttrain.api import conditions as c
from disttrain.api import load_job
from disttrain.api.report import TrainerReport, parse_report
from disttrain.api.types import DEFAULT_IMAGE
from disttrain.api.validate import validate_document
from disttrain.operator.core.plan import decide
from disttrain.integrations.registry import render_children
from disttrain.render import template_hash
from disttrain.render.instrument import BOOT, FOLDER, INIT_CONTAINER, VOLUME

from .helpers import job
from .plan_builders import NOW, POLICY, QUIET, at, cond, iso, pod, state

SCRIPT = {"command": ["/workspace/train.py"]}


def worker(**spec) -> dict:
    j, r, _ = load_job(job(**spec))
    return next(c for c in render_children(j, r) if c["kind"] == "Pod")


def test_auto_copies_the_package_in_an_init_container_and_puts_its_folder_first_on_pythonpath():
    pod_ = worker(trainer={**SCRIPT, "instrument": "auto"}, imagePullPolicy="Never",
                  env=[{"name": "PYTHONPATH", "value": "/workspace/lib"}, {"name": "A", "value": "1"}])
    spec = pod_["spec"]
    (init,) = spec["initContainers"]
    trainer = spec["containers"][0]
    assert (init["name"], init["image"], init["imagePullPolicy"]) == (INIT_CONTAINER, DEFAULT_IMAGE, "Never")
    assert init["command"] == ["python", "-m", "disttrain_trainer.instrument.install", FOLDER]
    assert init["volumeMounts"] == [{"name": VOLUME, "mountPath": FOLDER}]
    assert init["securityContext"] == trainer["securityContext"]  # non-root, read-only root, no capabilities
    assert {"name": VOLUME, "emptyDir": {"sizeLimit": "64Mi"}} in spec["volumes"]
    assert {"name": VOLUME, "mountPath": FOLDER, "readOnly": True} in trainer["volumeMounts"]
    env = [e for e in trainer["env"] if e["name"] == "PYTHONPATH"]
    assert env == [{"name": "PYTHONPATH", "value": f"{BOOT}:/workspace/lib"}]
    assert worker(trainer={**SCRIPT, "instrument": "auto", "instrumentImage": "registry.example.com/dt:1"})[
        "spec"]["initContainers"][0]["image"] == "registry.example.com/dt:1"
    plain = worker(trainer=SCRIPT)["spec"]
    assert "initContainers" not in plain and not any(v["name"] == VOLUME for v in plain["volumes"])
    assert not any(e["name"] == "PYTHONPATH" for e in plain["containers"][0]["env"])


def test_jobs_made_before_the_field_keep_their_template_hash_and_auto_changes_it():
    before = template_hash(*load_job(job(nodes=2))[:2])
    assert before == "62a7e61cff1e4409"  # test_render.py's hash of the same job, from before instrument existed
    script = template_hash(*load_job(job(trainer=SCRIPT))[:2])
    assert template_hash(*load_job(job(trainer={**SCRIPT, "instrument": "auto"}))[:2]) != script


def test_what_auto_cannot_be_combined_with_is_refused_saying_why():
    errors = [str(e) for e in validate_document(job(trainer={"builtin": {}, "instrument": "auto"})).errors]
    assert errors == ["spec.trainer.instrument: is for your own command (got 'auto'); allowed: none with builtin (the "
                      "built-in trainer reports on its own). Fix: remove instrument"]
    errors = [str(e) for e in validate_document(job(trainer={**SCRIPT, "instrument": "auto"}, env=[
        {"name": "PYTHONPATH", "valueFrom": {"configMapKeyRef": {"name": "x", "key": "p"}}}])).errors]
    assert errors == ["spec.env[0].valueFrom: cannot be combined with instrument: auto (got 'PYTHONPATH'); allowed: "
                      "PYTHONPATH given as value. Fix: give PYTHONPATH as value: (instrument: auto puts its own folder "
                      "in front of it)"]
    errors = [str(e) for e in validate_document(job(trainer={**SCRIPT, "instrumentImage": "i"})).errors]
    assert errors == ["spec.trainer.instrumentImage: is only used with instrument: auto (got 'i'). Fix: set "
                      "instrument: auto or remove it"]


SPEC = {"nodes": 2, **QUIET, "trainer": {**SCRIPT, "instrument": "auto"}}


def running_since(moment) -> dict:
    return {"phase": "Running", "startTime": iso(moment),
            "conditions": [{"type": "Running", "status": "True", "reason": "PodsRunning", "message": "2 of 2",
                            "lastTransitionTime": iso(moment)}]}


def go(status, now, report=None, **spec):
    pods = [pod(0, **SPEC), pod(1, **SPEC)]
    return decide(state(status, **{**SPEC, **spec}), pods, now, POLICY, report=report)


def test_instrumented_says_which_framework_reports_or_after_the_start_up_allowance_that_none_does():
    found = go(running_since(at(-30)), NOW, TrainerReport(step=3, total_steps=9, framework="transformers 5.24.0"))
    assert (cond(found, c.INSTRUMENTED)["status"], cond(found, c.INSTRUMENTED)["reason"]) == ("True",
                                                                                             c.CALLBACK_ATTACHED)
    assert "transformers 5.24.0" in cond(found, c.INSTRUMENTED)["message"]
    early = go(running_since(at(-30)), NOW)
    assert cond(early, c.INSTRUMENTED) is None and early.wake_at == at(270)  # looked at again when it is due
    late = go(running_since(at(-300)), NOW)
    none = cond(late, c.INSTRUMENTED)
    assert (none["status"], none["reason"]) == ("False", c.NO_TRAINER_FOUND)
    assert none["message"].startswith("no report from the trainer 300s after it started: instrument: auto found no")
    assert cond(go(running_since(at(-300)), NOW, trainer=SCRIPT), c.INSTRUMENTED) is None  # not asked for: not said
    assert parse_report({"step": 1, "framework": "lightning 2.6.6"}).framework == "lightning 2.6.6"

"""The sweep's pure core: the file's validation messages (field, value, allowed, fix),
parameter paths checked against the API's own types and bounds, suggestions patched into
trial jobs with their labels, and the results table."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest

from disttrain.api import load_job
from disttrain.sweep.results import best_trial, median_value, summary, table
from disttrain.sweep.space import best_job, patch, suggest, trial_job
from disttrain.sweep.spec import field_type, parse_sweep

TEMPLATE = {"apiVersion": "disttrain.dev/v1alpha1", "kind": "DistributedTraining",
            "metadata": {"name": "gpt", "labels": {"team": "a"}},
            "spec": {"trainer": {"builtin": {"model": "mlp", "steps": 100, "evalIntervalSteps": 10}}}}
SCRIPT = {"apiVersion": "disttrain.dev/v1alpha1", "kind": "DistributedTraining", "metadata": {"name": "mine"},
          "spec": {"trainer": {"command": ["/workspace/train.py"]},
                   "env": [{"name": "OMP_NUM_THREADS", "value": "1"}]}}
GOOD = {
    "name": "lr",
    "template": TEMPLATE,
    "parameters": {
        "spec.trainer.builtin.learningRate": {"type": "float", "low": "1e-4", "high": 1e-2, "log": True},
        "spec.trainer.builtin.batchSize": {"type": "int", "low": 4, "high": 32, "step": 4},
        "spec.strategy": {"choices": ["ddp", "fsdp"]},
    },
    "trials": 6,
}


def sweep(**changes):
    doc = copy.deepcopy(GOOD)
    for key, value in changes.items():
        if value is None:
            doc.pop(key, None)
        else:
            doc[key] = value
    return doc


def errors(doc, templates=None):
    def load(path):
        if templates and path in templates:
            return templates[path]
        raise ValueError(f"{path}: cannot read: No such file or directory")

    spec, errs = parse_sweep(doc, load)
    assert (spec is None) == bool(errs)
    return [str(e) for e in errs]


def test_a_good_sweep_parses_with_defaults():
    spec, errs = parse_sweep(GOOD, lambda p: {})
    assert errs == []
    assert (spec.sampler, spec.seed, spec.pruner, spec.startup_trials, spec.parallelism, spec.mode, spec.folds) == (
        "tpe", 0, "median", 2, 1, "local", 0)
    lr = spec.params[0]
    assert (lr.kind, lr.low, lr.high, lr.log) == ("float", 1e-4, 1e-2, True)  # "1e-4": PyYAML's text for it
    assert spec.params[2].choices == ("ddp", "fsdp")


def test_a_template_by_path():
    spec, errs = parse_sweep(sweep(template="job.yaml"), lambda p: TEMPLATE if p == "job.yaml" else {})
    assert errs == [] and spec.template == TEMPLATE


@pytest.mark.parametrize("doc,expected", [
    (sweep(name="Big"), "name: is not a valid sweep name (got 'Big'); allowed: a DNS label of at most 40 "
     "characters (a-z, 0-9, '-', starting with a letter). Fix: e.g. name: lr-search; it prefixes every trial's job name"),
    (sweep(trails=3), "trails: is not a sweep field (got 3); allowed: name, template, parameters, objective, "
     "sampler, pruner, trials, parallelism, mode, kfold, namespace. Fix: did you mean 'trials'?"),
    (sweep(trials=None), "trials: is not an integer (not set); allowed: an integer in 1..10000. Fix: set trials"),
    (sweep(parallelism=0), "parallelism: is out of range (got 0); allowed: an integer in 1..256. Fix: set parallelism"),
    (sweep(mode="k8s"), "mode: is not supported (got 'k8s'); allowed: local, cluster. Fix: use one of local, cluster"),
    (sweep(sampler={"type": "TPE"}), "sampler.type: is not supported (got 'TPE'); allowed: tpe, random. "
     "Fix: use 'tpe' (values are case-sensitive)"),
    (sweep(pruner={"type": "hyperband"}), "pruner.type: is not supported (got 'hyperband'); allowed: median, none. "
     "Fix: use one of median, none"),
    (sweep(objective={"metric": "accuracy"}), "objective.metric: is not reported by the built-in trainer (got "
     "'accuracy'); allowed: evalLoss for a template with spec.trainer.builtin; a named metric for your own code that "
     "reports it (disttrain.train). Fix: metric: evalLoss"),
    (sweep(template=SCRIPT, objective={"metric": "top 1"}), "objective.metric: is not a metric name (got 'top 1')"),
    (sweep(objective={"direction": "up"}), "objective.direction: is not supported (got 'up'); allowed: minimize, "
     "maximize"),
    (sweep(sampler={"type": "random", "sead": 3}), "sampler.sead: is not a sampler field (got 3); allowed: type, "
     "seed. Fix: did you mean 'seed'?"),
    (sweep(kfold={"folds": 1}), "kfold.folds: is out of range (got 1); allowed: an integer in 2..20. Fix: set folds"),
    (sweep(template="missing.yaml"), "template: cannot be read: missing.yaml: cannot read: No such file or "
     "directory (got 'missing.yaml'); allowed: a path to a DistributedTraining file (relative to the sweep file) "
     "or one inline. Fix: fix the path or the file"),
    (sweep(template={**TEMPLATE, "spec": {"nodes": 0}}), "template.spec.nodes: is out of range (got 0); "
     "allowed: >= 1 and <= 1024. Fix: choose a value in that range"),
    (sweep(parameters={}), "parameters: must map at least one field path to its range (got {}); allowed: "
     "{spec.<field>: {type: float|int, low, high, log}} or {spec.<field>: {choices: [...]}}. Fix: e.g. parameters: "
     "{spec.trainer.builtin.learningRate: {type: float, low: 1e-4, high: 1e-2, log: true}}"),
    (sweep(parameters={"spec.trainer.builtin.learningrate": {"type": "float", "low": 1, "high": 2}}),
     "parameters[spec.trainer.builtin.learningrate]: is not a field of a DistributedTraining's spec (got "
     "'spec.trainer.builtin.learningrate'); allowed: a dotted path to a number, string or boolean field in "
     "docs/api.md. Fix: use 'spec.trainer.builtin.learningRate' (values are case-sensitive)"),
    (sweep(parameters={"spec.trainer.builtin": {"choices": [1]}}),
     "parameters[spec.trainer.builtin]: is not a field of a DistributedTraining's spec (got "
     "'spec.trainer.builtin'); allowed: a dotted path to a number, string or boolean field in docs/api.md. "
     "Fix: name one of its fields: spec.trainer.builtin.model, spec.trainer.builtin.dataset, "
     "spec.trainer.builtin.steps, spec.trainer.builtin.batchSize, spec.trainer.builtin.learningRate, "
     "spec.trainer.builtin.seed"),
    (sweep(parameters={"spec.trainer.builtin.batchSize": {"type": "float", "low": 1, "high": 2}}),
     "parameters[spec.trainer.builtin.batchSize].type: does not fit spec.trainer.builtin.batchSize, which holds "
     "int (got 'float'); allowed: int. Fix: use type: int"),
    (sweep(parameters={"spec.strategy": {"type": "int", "low": 1, "high": 2}}),
     "parameters[spec.strategy].type: does not fit spec.strategy, which holds str (got 'int'); allowed: "
     "choices: [...]. Fix: list the values as choices: [...]"),
    (sweep(parameters={"spec.trainer.builtin.steps": {"type": "int", "low": 10, "high": 5}}),
     "parameters[spec.trainer.builtin.steps].high: is not above low 10 (got 5); allowed: a value > 10. "
     "Fix: swap low and high, or use choices for a single value"),
    (sweep(parameters={"spec.trainer.builtin.learningRate": {"type": "float", "low": 0, "high": 1, "log": True}}),
     "parameters[spec.trainer.builtin.learningRate].low: must be > 0 on a log scale (got 0); allowed: a value > 0. "
     "Fix: raise low or set log: false"),
    (sweep(parameters={"spec.trainer.builtin.learningRate": {"type": "float", "low": 1e-4, "high": 20}}),
     "parameters[spec.trainer.builtin.learningRate].high: makes the template invalid: is out of range (got 20); "
     "allowed: > 0 and <= 10. Fix: choose a value in that range"),
    (sweep(parameters={"spec.strategy": {"choices": ["ddp", "zero3"]}}),
     "parameters[spec.strategy].choices: makes the template invalid: is not allowed (got 'zero3'); allowed: auto, "
     "ddp, fsdp, fsdp_native. Fix: remove it from choices"),
    (sweep(parameters={"spec.strategy": {"choices": ["ddp", "ddp"]}}),
     "parameters[spec.strategy].choices: is not a list of distinct values (got ['ddp', 'ddp']); allowed: a "
     "non-empty list of distinct strings, numbers or booleans. Fix: e.g. choices: [ddp, fsdp]"),
    (sweep(parameters={"spec.trainer.builtin.steps": {"type": "int", "low": 1, "high": 9, "size": 2}}),
     "parameters[spec.trainer.builtin.steps].size: is not a parameter field (got 2); allowed: type, low, high, "
     "log, step, choices. Fix: remove it"),
    (sweep(template={**TEMPLATE, "spec": {"trainer": {"builtin": {"model": "mlp"}}}}),
     "pruner.type: needs intermediate eval losses, and the template evaluates only after its last step (got "
     "'median'); allowed: none, or median with spec.trainer.builtin.evalIntervalSteps > 0 in the template. Fix: "
     "set spec.trainer.builtin.evalIntervalSteps (e.g. a tenth of steps) or pruner: {type: none}"),
    (sweep(template=SCRIPT, parameters={"spec.env.DISTTRAIN_LR": {"choices": [1, 2]}}),
     "parameters[spec.env.DISTTRAIN_LR].choices: makes the template invalid: "),
    (sweep(template=SCRIPT, kfold={"folds": 2}, parameters={"spec.env.SWEEP_FOLD": {"choices": [0, 1]}}),
     "parameters[spec.env.SWEEP_FOLD]: is set by kfold for every fold (got 'SWEEP_FOLD'); allowed: any other "
     "field. Fix: remove the parameter or kfold"),
    (sweep(kfold={"folds": 4}, parameters={"spec.trainer.builtin.evalFold": {"choices": [0, 1]}}),
     "parameters[spec.trainer.builtin.evalFold]: is set by kfold for every fold (got 'evalFold'); allowed: any "
     "other field. Fix: remove the parameter or kfold"),
])
def test_errors_name_the_field_the_value_what_is_allowed_and_the_fix(doc, expected):
    assert any(e.startswith(expected) for e in errors(doc)), errors(doc)


def test_your_own_script_is_swept_through_its_environment_and_given_its_fold():
    """spec.env.NAME sets (or adds) a worker variable as text; with kfold a script's job
    gets SWEEP_FOLD and SWEEP_FOLDS, and the best job neither."""
    doc = sweep(template=SCRIPT, kfold={"folds": 3},
                parameters={"spec.env.LEARNING_RATE": {"type": "float", "low": 1e-4, "high": 0.1, "log": True},
                            "spec.env.OMP_NUM_THREADS": {"choices": [1, 2]}, "spec.env.AMP": {"choices": [True]}})
    spec, errs = parse_sweep(doc, lambda p: {})
    assert errs == [] and field_type("spec.env.X") == {float, int, str, bool} and field_type("spec.env.") is None
    values = {"spec.env.LEARNING_RATE": 0.003, "spec.env.OMP_NUM_THREADS": 2, "spec.env.AMP": True}
    job = trial_job(spec, 4, values, fold=1)
    assert job["spec"]["env"] == [{"name": "LEARNING_RATE", "value": "0.003"}, {"name": "OMP_NUM_THREADS", "value": "2"},
                                  {"name": "AMP", "value": "true"}, {"name": "SWEEP_FOLD", "value": "1"},
                                  {"name": "SWEEP_FOLDS", "value": "3"}]
    assert "builtin" not in job["spec"]["trainer"]
    load_job(job)  # a valid DistributedTraining
    best = best_job(spec, values, 4)
    assert {e["name"] for e in best["spec"]["env"]} == {"LEARNING_RATE", "OMP_NUM_THREADS", "AMP"}


def test_field_types_come_from_the_api():
    assert field_type("spec.trainer.builtin.learningRate") == {float}
    assert field_type("spec.nodes") == {int}
    assert field_type("spec.precision") == {str}
    assert field_type("spec.suspend") == {bool}
    assert field_type("spec.mesh.fsdp") == {int}
    assert field_type("spec.env") is None and field_type("metadata.name") is None
    assert field_type("spec.nodes.extra") is None


class FakeTrial:
    def suggest_float(self, name, low, high, *, step=None, log=False):
        return high

    def suggest_int(self, name, low, high, *, step=1, log=False):
        return low

    def suggest_categorical(self, name, choices):
        return choices[-1]


def test_trial_jobs_are_the_template_patched_named_and_labelled():
    spec, _ = parse_sweep(GOOD, lambda p: {})
    values = suggest(FakeTrial(), spec.params)
    assert values == {"spec.trainer.builtin.learningRate": 1e-2, "spec.trainer.builtin.batchSize": 4,
                      "spec.strategy": "fsdp"}
    doc = trial_job(spec, 7, values)
    job, _, _ = load_job(doc)
    assert job.name == "lr-t007" and job.spec.trainer.builtin.batch_size == 4 and job.spec.strategy == "fsdp"
    assert doc["metadata"]["labels"] == {"team": "a", "disttrain.dev/sweep": "lr", "disttrain.dev/trial": "7"}
    assert TEMPLATE["metadata"]["labels"] == {"team": "a"}  # the template is never changed
    folded = trial_job(spec.__class__(**{**{f: getattr(spec, f) for f in spec.__slots__}, "folds": 4}), 7, values, 3)
    job, _, _ = load_job(folded)
    assert job.name == "lr-t007-f3" and folded["metadata"]["labels"]["disttrain.dev/fold"] == "3"
    assert (job.spec.trainer.builtin.eval_fraction, job.spec.trainer.builtin.eval_fold) == (0.25, 3)
    best = best_job(spec, values, 7)
    assert best["metadata"]["name"] == "lr-best" and "disttrain.dev/sweep" not in best["metadata"]["labels"]
    assert patch({}, {"a.b.c": 1}) == {"a": {"b": {"c": 1}}}


def row(number, state, value=None, steps=None, **params):
    return SimpleNamespace(number=number, state=SimpleNamespace(name=state), value=value,
                           params={f"spec.trainer.builtin.{k}": v for k, v in params.items()},
                           intermediate_values=steps or {}, user_attrs={})


def test_table_best_and_median():
    trials = [row(0, "COMPLETE", 1.5, learningRate=0.001), row(1, "PRUNED", None, {10: 9.0}, learningRate=0.2),
              row(2, "COMPLETE", 1.25, learningRate=0.003), row(3, "FAIL", learningRate=0.01)]
    assert best_trial(trials).number == 2
    assert median_value(trials) == 1.5  # 1.25, 1.5 and the pruned one's 9.0
    text = table(trials, ["spec.trainer.builtin.learningRate"])
    assert text.splitlines() == [
        "trial  state   evalLoss  learningRate  note",
        "0      done    1.5000    0.001",
        "1      pruned  -         0.2           pruned at step 10 (evalLoss 9.0000)",
        "2 *    done    1.2500    0.003",
        "3      failed  -         0.01",
    ]
    assert summary(trials) == ("4 trials: 2 done, 1 pruned, 1 failed; best trial 2: evalLoss 1.2500 "
                               "(median over all trials 1.5000)")
    # A named metric to maximize: the best is the highest, and the table is headed by its name.
    assert best_trial(trials, "maximize").number == 0
    assert summary(trials, "accuracy", "maximize").endswith("best trial 0: accuracy 1.5000 (median over all trials 1.5000)")
    assert table(trials, [], "accuracy", "maximize").splitlines()[1].startswith("0 *    done    1.5000")


def test_the_example_sweeps_are_valid():
    from pathlib import Path

    from disttrain.sweep.command import load_sweep

    examples = sorted((Path(__file__).resolve().parents[2] / "manifests" / "examples" / "sweeps").glob("*.yaml"))
    assert examples
    for path in examples:
        spec = load_sweep(str(path))
        assert spec is not None and spec.params, path

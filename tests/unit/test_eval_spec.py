"""The held-out split in the API: evalFold must fall inside the data, the trainer gets the
DISTTRAIN_EVAL_* env only when the split differs from its defaults, and jobs that do not
use it keep their pod template hash (an operator upgrade replaces no running worker)."""

from __future__ import annotations

from disttrain.api import load_job
from disttrain.render import render_pod, template_hash

from .helpers import errors_of, job


def builtin(**fields):
    return job(trainer={"builtin": {"model": "mlp", **fields}})


def env_of(doc):
    j, r, _ = load_job(doc)
    return {e["name"]: e.get("value") for e in render_pod(j, r, 0)["spec"]["containers"][0]["env"]}


def test_eval_fold_past_the_last_block_is_an_error():
    assert errors_of(builtin(evalFraction=0.25, evalFold=4)) == [
        "spec.trainer.builtin.evalFold: is past the last block of evalFraction 0.25 (got 4); allowed: 0..3. "
        "Fix: lower evalFold or evalFraction (k-fold: 1/k and 0..k-1)"]
    assert errors_of(builtin(evalFraction=0.25, evalFold=3)) == []
    assert errors_of(builtin(evalFraction=0, evalFold=0)) == []


def test_eval_env_only_away_from_the_defaults():
    assert not {k for k in env_of(builtin()) if k.startswith("DISTTRAIN_EVAL_")}
    env = env_of(builtin(evalFraction=0.2, evalFold=1, evalIntervalSteps=25))
    assert (env["DISTTRAIN_EVAL_FRACTION"], env["DISTTRAIN_EVAL_FOLD"], env["DISTTRAIN_EVAL_INTERVAL_STEPS"]) == (
        "0.2", "1", "25")


def test_template_hash_moves_only_when_evaluation_is_configured():
    plain, defaults = load_job(builtin()), load_job(builtin(evalFraction=0.1, evalFold=0))
    assert template_hash(*plain[:2]) == template_hash(*defaults[:2])
    changed = load_job(builtin(evalIntervalSteps=5))
    assert template_hash(*changed[:2]) != template_hash(*plain[:2])

"""Mixed precision against the fp32 run, on CPU with gloo (docs/trainer.md, "Precision").

FSDP2 runs bf16-mixed and 16-mixed through `MixedPrecisionPolicy`: parameters all-gathered
and used in the compute dtype, gradients reduce-scattered in fp32. Checked here, on two
real gloo processes: the collectives' dtypes (recorded at FSDP's call into c10d), the
dtype the weights have inside forward, and that the run stays within a documented
tolerance of the fp32 single-process run on the same global batch. 16-mixed is not
reachable through the config on CPU (the guardrail turns it into 32, the gradient scaler
being a CUDA feature for the trainer), so its test forces the resolved precision;
gloo does carry fp16 all-gathers. What only a GPU can check is listed in docs/trainer.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dt_helpers import Run, run_inprocess, run_torchrun, tiny_config

STEPS = 4
GLOBAL = 4
# Tolerances for 4 steps of gpt-nano (measured: bf16 loss 2e-4 and update 4e-2 relative,
# fp16 3e-5 and 1.4e-2); about 2.5x to 10x headroom. The update is compared as a whole
# (relative L2 of param - init), as in the FSDP x TP parity test: Adam's 1/sqrt(v) turns
# rounding on near-zero gradients into visible noise elementwise.
LOSS_RTOL = 2e-3
UPDATE_RTOL = {"bf16-mixed": 0.1, "16-mixed": 0.05}
DTYPE = {"bf16-mixed": "torch.bfloat16", "16-mixed": "torch.float16"}


@pytest.fixture(scope="module")
def reference() -> Run:
    return run_inprocess(tiny_config(steps=STEPS, batch=GLOBAL))


@pytest.fixture(scope="module")
def init() -> Run:
    return run_inprocess(tiny_config(steps=0))


def assert_within_tolerance(run: Run, reference: Run, init: Run, update_rtol: float) -> None:
    ref = reference.result.losses
    assert run.result.losses.keys() == ref.keys()
    for step, loss in run.result.losses.items():
        assert loss == pytest.approx(ref[step], rel=LOSS_RTOL), (step, run.result.losses, ref)
    keys = init.params.keys()
    diff = sum(float(((run.params[k] - reference.params[k]) ** 2).sum()) for k in keys) ** 0.5
    moved = sum(float(((reference.params[k] - init.params[k]) ** 2).sum()) for k in keys) ** 0.5
    assert diff / moved < update_rtol, (diff, moved)
    # ...and it is not simply the fp32 run: rounding must show somewhere.
    assert diff > 0


@pytest.mark.dist
@pytest.mark.parametrize("precision", ["bf16-mixed", "16-mixed"])
def test_fsdp_mixed_precision_policy_matches_fp32(precision: str, reference: Run, init: Run, tmp_path: Path) -> None:
    env = {"TEST_RECORD_PRECISION": "1"}
    if precision == "16-mixed":
        env["TEST_FORCE_PRECISION"] = precision
    run = run_torchrun(tiny_config(steps=STEPS, batch=GLOBAL // 2, strategy="fsdp", precision=precision),
                       2, tmp_path, extra_env=env)
    comms = run.result.comms
    gathers = {dtype for (op, dtype) in comms if op == "all_gather_single"}
    reductions = {dtype for (op, dtype) in comms if op == "reduce_scatter_single"}
    assert gathers == {DTYPE[precision]}, comms  # parameters travel in the compute dtype
    assert reductions == {"torch.float32"}, comms  # gradients are summed in fp32
    assert run.result.weight_dtypes == [DTYPE[precision]]  # and forward computes in it
    assert_within_tolerance(run, reference, init, UPDATE_RTOL[precision])


def test_single_device_bf16_autocast_matches_fp32(reference: Run, init: Run) -> None:
    """The other half of the rule: without FSDP, autocast (weights stay fp32)."""
    run = run_inprocess(tiny_config(steps=STEPS, batch=GLOBAL, precision="bf16-mixed"))
    assert_within_tolerance(run, reference, init, UPDATE_RTOL["bf16-mixed"])

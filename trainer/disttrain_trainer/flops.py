"""Model FLOPs utilisation: the device's peak by name, and MFU from a measured rate. Pure.

The model side (`flops_per_token` on each built-in model) counts 6 FLOPs per parameter
per token for forward and backward of every matmul, plus attention's score and value
products; MFU is the achieved model FLOPs over what the devices could do at their dense
peak in the run's compute dtype. Unknown devices (and CPUs) have no peak: MFU is n/a,
never a guess.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Peak:
    """Dense (no sparsity) peak TFLOPS of one device, from the vendor's datasheet. fp32 is
    the plain fp32 peak: PyTorch runs fp32 matmuls without TF32 unless told to."""

    bf16: float | None
    fp16: float | None
    fp32: float


# First match wins: the more specific names come before the ones they contain.
PEAK_TFLOPS: tuple[tuple[str, Peak], ...] = (
    (r"H200", Peak(bf16=989.5, fp16=989.5, fp32=67.0)),
    (r"H100.*NVL", Peak(bf16=835.0, fp16=835.0, fp32=60.0)),
    (r"H100.*PCIe", Peak(bf16=756.0, fp16=756.0, fp32=51.0)),
    (r"H100", Peak(bf16=989.5, fp16=989.5, fp32=67.0)),  # SXM
    (r"A100", Peak(bf16=312.0, fp16=312.0, fp32=19.5)),
    (r"L40S", Peak(bf16=362.0, fp16=362.0, fp32=91.6)),
    (r"\bL4\b", Peak(bf16=121.0, fp16=121.0, fp32=30.3)),
    (r"\bA10\b", Peak(bf16=125.0, fp16=125.0, fp32=31.2)),
    (r"V100", Peak(bf16=None, fp16=125.0, fp32=15.7)),
    (r"\bT4\b", Peak(bf16=None, fp16=65.0, fp32=8.1)),
)


def peak_flops(device_name: str, precision: str) -> float | None:
    """Peak FLOP/s of one device in the compute dtype of `precision`, or None if unknown."""
    for pattern, peak in PEAK_TFLOPS:
        if re.search(pattern, device_name):
            tflops = {"bf16-mixed": peak.bf16, "16-mixed": peak.fp16}.get(precision, peak.fp32)
            return None if tflops is None else tflops * 1e12
    return None


def mfu(tokens_per_second: float, flops_per_token: float, devices: int, peak: float | None) -> float | None:
    """Fraction of the devices' peak the model's FLOPs reach; None when the peak is unknown."""
    if peak is None or devices < 1 or flops_per_token <= 0:
        return None
    return tokens_per_second * flops_per_token / (devices * peak)


def format_mfu(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"

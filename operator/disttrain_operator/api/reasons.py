"""Reasons of guardrail warnings: CamelCase, shared by the Validated condition, Events
and the disttrain_operator_validation_warnings_total{reason} metric."""

DDP_SINGLE_DEVICE = "DDPSingleDevice"
FSDP_SINGLE_DEVICE = "FSDPSingleDevice"
NPROC_CLAMPED = "NprocClamped"
IDLE_GPUS = "IdleGPUs"
PRECISION_FALLBACK = "PrecisionFallback"
FSDP_WITHOUT_BF16 = "FSDPWithoutBF16"
TP_ACROSS_NODES = "TensorParallelAcrossNodes"
EPHEMERAL_CHECKPOINTS = "EphemeralCheckpoints"
CHECKPOINT_INTERVAL_BEYOND_STEPS = "CheckpointIntervalBeyondSteps"
MUTABLE_IMAGE_TAG = "MutableImageTag"

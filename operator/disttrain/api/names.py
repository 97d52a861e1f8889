"""Deterministic names and labels of a job's children.

A re-run after a crash computes the same names, so creating is idempotent.
"""

from __future__ import annotations

from disttrain.api.types import GROUP, MAX_NODES

WORKER_INFIX = "-worker-"
DNS_LABEL_MAX = 63
# <job>-worker-<i> must be a DNS label (pod hostname) for every i < MAX_NODES.
MAX_JOB_NAME_LENGTH = DNS_LABEL_MAX - len(WORKER_INFIX) - len(str(MAX_NODES - 1))

JOB_LABEL = f"{GROUP}/job"
INDEX_LABEL = f"{GROUP}/worker-index"
ROLE_LABEL = f"{GROUP}/role"
FINALIZER = f"{GROUP}/finalizer"
CONTAINER_NAME = "trainer"
# Directories every worker pod mounts besides the checkpoint volume (render/pod.py):
# NCCL and DataLoader workers share tensors through a memory-backed /dev/shm, and the
# read-only root filesystem needs a writable /tmp.
# The names every AWS SDK (botocore under the trainer's s3fs, boto3 in a user's script)
# reads, set from spec.checkpoint.secretRef and endpoint (render/env.py object_store_env).
CREDENTIAL_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
OPTIONAL_CREDENTIAL_ENV = frozenset({"AWS_SESSION_TOKEN"})
ENDPOINT_ENV = "AWS_ENDPOINT_URL_S3"
SHM_MOUNT = "/dev/shm"
TMP_MOUNT = "/tmp"
# Kernel filesystems the container runtime mounts: a volume may not be, hold or cover them.
SYSTEM_DIRECTORIES = ("/dev", "/proc", "/sys")


def worker_name(job: str, index: int) -> str:
    return f"{job}{WORKER_INFIX}{index}"


def service_name(job: str) -> str:
    return job


def worker_index(pod_name: str, job: str) -> int | None:
    """The index in `<job>-worker-<i>`, or None for a name we did not make."""
    prefix = f"{job}{WORKER_INFIX}"
    tail = pod_name[len(prefix):] if pod_name.startswith(prefix) else ""
    return int(tail) if tail.isdigit() and str(int(tail)) == tail else None


def selector(job: str) -> str:
    return f"{JOB_LABEL}={job}"

"""`from disttrain import Client`: submit and follow DistributedTraining jobs from Python
(a notebook, a script) without torch or kopf. See docs/cli.md, "The Python client"."""

from disttrain_operator.api.types import DistributedTrainingSpec
from disttrain_operator.client import (ApplyConflict, Client, DisttrainError, Forbidden, InvalidArgument, InvalidJob,
                                       JobFailed, KubeconfigError, LogLine, NotFound, Unreachable, WaitTimeout)
from disttrain_operator.jobview import JobView

__all__ = ["ApplyConflict", "Client", "DistributedTrainingSpec", "DisttrainError", "Forbidden", "InvalidArgument", "InvalidJob",
           "JobFailed", "JobView", "KubeconfigError", "LogLine", "NotFound", "Unreachable", "WaitTimeout"]

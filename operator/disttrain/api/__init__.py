"""The DistributedTraining API model: types, schema, parse, defaults, validate."""

from disttrain.api.errors import FieldError, GuardrailWarning, InvalidSpec
from disttrain.api.types import API_VERSION, KIND, Job
from disttrain.api.status_types import Resolved
from disttrain.api.validate import Validation, load_job, validate_document

__all__ = ["API_VERSION", "KIND", "FieldError", "GuardrailWarning", "InvalidSpec", "Job",
           "Resolved", "Validation", "load_job", "validate_document"]

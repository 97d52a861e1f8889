"""Zero-code instrumentation (`spec.trainer.instrument: auto`, docs/training-api.md).

The operator's init container runs `python -m disttrain_trainer.instrument.install DIR`
from the trainer image: it copies this package, `disttrain` and prometheus-client into
DIR/lib and puts a `sitecustomize.py` into DIR/boot. The worker's PYTHONPATH starts with
DIR/boot, so Python runs that file at start-up in the user's own image: it appends DIR/lib
to the end of sys.path (the image's own packages win), installs the post-import hooks of
hooks.py, and then runs the image's own sitecustomize, if it has one. The hooks attach
disttrain's callback to every Transformers or Lightning Trainer the user's code builds.
Nothing here may stop the user's training: a failure is a warning in the log.
"""

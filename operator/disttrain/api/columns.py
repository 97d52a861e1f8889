"""The columns a list of jobs is shown in, in order, stated once: `kubectl get dt` reads
them from the CRD (api/schema.py makes them its additionalPrinterColumns) and
`disttrain get|top` prints the same, with a few cells richer (client/jobview.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Column:
    """One column after NAME (and NAMESPACE with -A)."""

    name: str  # as the CRD spells it; both print it upper-cased
    type: str  # the CRD's column type: string, integer, number or date
    json_path: str  # what kubectl prints in it
    description: str = ""
    wide: bool = False  # only with -o wide (the CRD's priority 1)


JOB_COLUMNS: tuple[Column, ...] = (
    Column("Phase", "string", ".status.phase", "Pending, Running, Restarting, Suspended, Succeeded or Failed"),
    Column("Nodes", "integer", ".status.workers.running", "worker pods running (what the Running condition counts)"),
    Column("World", "integer", ".status.resolved.worldSize", "processes in the job"),
    Column("Step", "integer", ".status.progress.step", "optimizer steps done"),
    Column("Progress", "string", ".status.progress.percentComplete", "step / totalSteps"),
    Column("Samples/s", "number", ".status.progress.samplesPerSecond", "global throughput"),
    Column("Checkpoint", "integer", ".status.checkpoint.step", "step of the newest checkpoint"),
    Column("Restarts", "integer", ".status.restarts", "worker pods recreated after failures"),
    Column("Age", "date", ".metadata.creationTimestamp"),
    Column("Strategy", "string", ".status.resolved.strategy", "resolved strategy", wide=True),
    Column("Loss", "number", ".status.progress.loss", "last reported loss", wide=True),
)

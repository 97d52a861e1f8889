"""A DistributedTraining as a user follows it (pure): progress, ETA, checkpoint age, and
the lines `disttrain get|status|top|submit|wait` print.

Everything here reads the object the operator writes (status.progress, status.checkpoint,
status.workers, conditions; docs/api.md) and core/v1 Events; nothing talks to a cluster,
so the CLI and the Python client (client.py) format alike and tests need no cluster.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime
from collections.abc import Callable
from typing import Any

from disttrain.api.columns import JOB_COLUMNS
from disttrain.api.meta import meta_of
from disttrain.api.types import BuiltinTrainer
from disttrain.client.columns import aligned
from disttrain.api.times import parse_time

TERMINAL = ("Succeeded", "Failed")
# What `wait --for` accepts: a phase the job can be waited into.
WAITABLE = ("Running", "Succeeded", "Suspended")
BAR_WIDTH = 20
# A job nothing has written a status to: no operator watches it (not installed, not running).
NO_OPERATOR = ("no operator has written its status: check it runs (kubectl get pods -n disttrain-system), "
               "else install it (helm install disttrain charts/disttrain -n disttrain-system --create-namespace)")


def unseen(obj: dict[str, Any]) -> str:
    """What a wait that timed out adds for a job no operator has written a status to."""
    return "" if obj.get("status") else f": {NO_OPERATOR}"


def resize_warning(before: dict[str, Any] | None, after: dict[str, Any]) -> str | None:
    """What `apply` warns of when it changed spec.nodes of a job that has workers, and the
    rendezvous range (PET_NNODES, minNodes:maxNodes, each nodes when unset) changed with it:
    a fixed-size job's workers are all replaced; an elastic job's range is left, so it
    scales in place and gets no warning."""
    if before is None or (before.get("status") or {}).get("phase") not in ("Running", "Restarting"):
        return None
    old, new = before.get("spec") or {}, after.get("spec") or {}

    def span(spec: dict[str, Any]) -> tuple[Any, Any]:
        return spec.get("minNodes", spec.get("nodes")), spec.get("maxNodes", spec.get("nodes"))

    if old.get("nodes") == new.get("nodes") or span(old) == span(new):
        return None
    low, high = span(new)
    what = "a fixed-size job" if low == high else f"a job whose range becomes {low}..{high}"
    return (f"Warning: {(after.get('metadata') or {}).get('name')}: spec.nodes {old.get('nodes')} -> {new.get('nodes')} on {what}: "
            "the operator re-creates all its workers and training resumes from the newest checkpoint (set "
            "minNodes and maxNodes to scale in place)")


@dataclass(frozen=True, slots=True)
class JobView:
    """One job's state, read from its object. None where the operator has not said yet."""

    name: str
    namespace: str | None = None
    phase: str | None = None
    world_size: int | None = None
    nodes: int | None = None  # workers pending or running
    running: int | None = None  # workers running (status.workers.running)
    desired: int | None = None
    nproc_per_node: int | None = None
    step: int | None = None
    total_steps: int | None = None
    loss: float | None = None
    samples_per_second: float | None = None
    global_batch: int | None = None  # samples per optimizer step, for the ETA
    step_seconds: float | None = None  # the trainer's mean step, the ETA's unit when it reports one
    eval_step: int | None = None  # the latest evaluation: its step, loss and named metrics
    eval_loss: float | None = None
    eval_metrics: dict[str, float] = field(default_factory=dict)
    checkpoint_step: int | None = None
    checkpoint_time: datetime | None = None
    checkpoint_path: str | None = None  # status.checkpoint.path: a URL, or a path in the pod
    checkpoint_claim: str | None = None  # spec.checkpoint.claimName: the volume that path is on
    restarts: int = 0
    suspended: bool = False
    created: datetime | None = None
    start_time: datetime | None = None
    completion_time: datetime | None = None
    conditions: tuple[dict[str, Any], ...] = field(default=())
    failures: tuple[dict[str, Any], ...] = field(default=())  # status.failures, oldest first
    avoided_nodes: tuple[dict[str, Any], ...] = field(default=())  # status.avoidedNodes
    topology: dict[str, Any] | None = None  # status.admission.topology: where TAS placed the workers
    goodput: dict[str, Any] | None = None  # status.goodput
    eviction: dict[str, Any] | None = None  # status.eviction: the latest stop on purpose
    template: dict[str, Any] | None = None  # status.template: what it was resolved against
    strategy: str | None = None  # status.resolved.strategy

    @property
    def finished(self) -> bool:
        return self.phase in TERMINAL

    @property
    def queued(self) -> bool:
        """Waiting in a Kueue queue (the Queued condition is True)."""
        return any(c.get("type") == "Queued" and c.get("status") == "True" for c in self.conditions)

    @property
    def shown_phase(self) -> str:
        """The phase as get/top print it: a Pending job waiting in its Kueue queue is Queued."""
        return "Queued" if self.queued and self.phase in (None, "Pending") else (self.phase or "Pending")

    @property
    def eta_seconds(self) -> float | None:
        """Seconds left at the trainer's current throughput; None when it cannot be told."""
        if self.step is None or not self.total_steps or self.finished:
            return None
        left = max(0, self.total_steps - self.step)
        if self.step_seconds:
            return left * self.step_seconds
        if not self.samples_per_second or not self.global_batch:
            return None
        return left * self.global_batch / self.samples_per_second

    def checkpoint_age(self, now: datetime) -> float | None:
        return (now - self.checkpoint_time).total_seconds() if self.checkpoint_time else None


def view_of(obj: dict[str, Any]) -> JobView:
    """A DistributedTraining object (as the API returns it) -> JobView."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    progress = status.get("progress") or {}
    checkpoint = status.get("checkpoint") or {}
    workers = status.get("workers") or {}
    resolved = status.get("resolved") or {}
    return JobView(
        name=meta.get("name", ""), namespace=meta.get("namespace"), phase=status.get("phase"),
        world_size=resolved.get("worldSize"), nodes=workers.get("active"), desired=workers.get("desired"),
        running=workers.get("running"), nproc_per_node=resolved.get("nprocPerNode"),
        step=progress.get("step"), total_steps=progress.get("totalSteps"), loss=progress.get("loss"),
        samples_per_second=progress.get("samplesPerSecond"), global_batch=global_batch_of(spec, resolved),
        step_seconds=progress.get("stepSeconds"), eval_step=progress.get("evalStep"),
        eval_loss=progress.get("evalLoss"),
        eval_metrics=progress.get("evalMetrics") if isinstance(progress.get("evalMetrics"), dict) else {},
        checkpoint_step=checkpoint.get("step"), checkpoint_time=parse_time(checkpoint.get("time")),
        checkpoint_path=checkpoint.get("path") or None,
        checkpoint_claim=(spec.get("checkpoint") or {}).get("claimName"),
        restarts=status.get("restarts") or 0, suspended=bool(spec.get("suspend")),
        created=parse_time(meta.get("creationTimestamp")), start_time=parse_time(status.get("startTime")),
        completion_time=parse_time(status.get("completionTime")),
        conditions=tuple(c for c in status.get("conditions") or () if isinstance(c, dict)),
        failures=tuple(f for f in status.get("failures") or () if isinstance(f, dict)),
        avoided_nodes=tuple(a for a in status.get("avoidedNodes") or () if isinstance(a, dict)),
        topology=((status.get("admission") or {}).get("topology") or None),
        goodput=status.get("goodput") if isinstance(status.get("goodput"), dict) else None,
        eviction=status.get("eviction") if isinstance(status.get("eviction"), dict) else None,
        template=status.get("template") if isinstance(status.get("template"), dict) else None,
        strategy=resolved.get("strategy"))


def global_batch_of(spec: dict[str, Any], resolved: dict[str, Any]) -> int | None:
    """Samples per optimizer step of the built-in trainer (batchSize x data-parallel
    degree x accumulation), as status.global_batch computes it from the typed spec.
    None for a user's script, whose samples/s need not be in the same unit."""
    trainer = spec.get("trainer") or {}
    if "command" in trainer:
        return None
    builtin = trainer.get("builtin") or {}
    world = resolved.get("worldSize")
    mesh = spec.get("mesh") or {}
    data_parallel = mesh.get("fsdp") or world
    batch = builtin.get("batchSize") or _default_batch_size()
    if not data_parallel or not batch:
        return None
    return int(batch) * int(data_parallel) * int(spec.get("accumulateGradBatches") or 1)


def _default_batch_size() -> int:
    """builtin.batchSize's documented default (api/types.py is its one source)."""
    return next(meta_of(f).default for f in dataclasses.fields(BuiltinTrainer) if f.name == "batch_size")


# ---- words ------------------------------------------------------------------------


def duration(seconds: float | None) -> str:
    """kubectl's short human durations: 45s, 3m20s, 12m, 5h10m, 3d."""
    if seconds is None:
        return "-"
    s = max(0, int(seconds))
    if s < 120:
        return f"{s}s"
    m, s = divmod(s, 60)
    if m < 10:
        return f"{m}m{s}s" if s else f"{m}m"
    if m < 180:
        return f"{m}m"
    h, m = divmod(m, 60)
    if h < 8:
        return f"{h}h{m}m" if m else f"{h}h"
    if h < 48:
        return f"{h}h"
    d, h = divmod(h, 24)
    return f"{d}d{h}h" if d < 8 and h else f"{d}d"


def bar(step: int | None, total: int | None, width: int = BAR_WIDTH) -> str:
    """[#######-------------] 35%; the bar is empty until the trainer reports a step."""
    if step is None or not total:
        return "[" + "-" * width + "]   -"
    fraction = min(1.0, max(0.0, step / total))
    filled = int(fraction * width)
    return f"[{'#' * filled}{'-' * (width - filled)}] {int(fraction * 100):3d}%"


def _rate(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}" if value < 1000 else f"{value:,.0f}"


def _steps(view: JobView) -> str:
    if view.step is None:
        return "-"
    return f"{view.step}/{view.total_steps}" if view.total_steps else str(view.step)


def _checkpoint(view: JobView, now: datetime) -> str:
    if view.checkpoint_step is None:
        return "-"
    age = view.checkpoint_age(now)
    return f"step {view.checkpoint_step}" + (f" ({duration(age)} ago)" if age is not None else "")


def checkpoint_location(view: JobView) -> str:
    """Where the newest checkpoint is: its object-store URL, or its path on the claim (or in
    a pod's own emptyDir, which goes with the pod)."""
    path = view.checkpoint_path
    if not path:
        return ""
    if "://" in path:
        return f"at {path}"
    return f"on claim {view.checkpoint_claim} at {path}" if view.checkpoint_claim else f"at {path} (the pod's emptyDir)"


def suspend_words(obj: dict[str, Any]) -> str:
    """What a suspend does to this job, by where its checkpoints live: only storage that
    outlives the pods is resumed from."""
    checkpoint = (obj.get("spec") or {}).get("checkpoint") or {}
    if checkpoint.get("storage") == "none":
        return "the pods are deleted; the job keeps no checkpoint, so resume starts from step 0"
    if checkpoint.get("uri") or checkpoint.get("claimName"):
        return ("a running trainer checkpoints its current step, then the pods are deleted; resume continues "
                "from that checkpoint")
    return ("the pods are deleted, and the checkpoints in their emptyDir with them: resume starts from step 0; "
            "set spec.checkpoint.claimName or uri to resume where it stopped")


def progress_line(view: JobView, now: datetime) -> str:
    """One line per change while following a job (submit, wait, watch)."""
    parts = [f"{view.name}: {view.phase or 'Pending'}"]
    if view.step is not None:
        parts.append(f"step {_steps(view)} {bar(view.step, view.total_steps)}")
    if view.loss is not None:
        parts.append(f"loss {view.loss:.4g}")
    if view.samples_per_second is not None:
        parts.append(f"{_rate(view.samples_per_second)} samples/s")
    if view.eta_seconds is not None:
        parts.append(f"ETA {duration(view.eta_seconds)}")
    if view.checkpoint_step is not None:
        parts.append(f"checkpoint {_checkpoint(view, now)}")
    return "  ".join(parts)


def status_lines(view: JobView, events: list[dict[str, Any]], now: datetime, max_events: int = 8) -> list[str]:
    """`disttrain status NAME`: phase, progress, checkpoint, conditions with their messages,
    recent Events (newest last, like `kubectl describe`)."""
    lines = [
        f"Name:        {view.name}",
        f"Namespace:   {view.namespace or '-'}",
        *([f"Template:    {template_words(view.template)}"] if view.template else []),
        f"Phase:       {view.phase or 'Pending'}"
        + (" (suspending)" if view.suspended and view.phase != "Suspended" else "")
        + (" (queued: waiting for Kueue's admission, see Queued below)" if view.shown_phase == "Queued" else ""),
        f"Workers:     {workers_words(view)}, restarts {view.restarts}",
        *([f"Placement:   {placement_words(view.topology)}"] if view.topology else []),
        f"Progress:    {bar(view.step, view.total_steps)}  step {_steps(view)}",
        f"Loss:        {view.loss:.6g}" if view.loss is not None else "Loss:        -",
        f"Throughput:  {_rate(view.samples_per_second)} samples/s",
        *([f"Eval:        {eval_words(view)}"] if view.eval_step is not None else []),
        f"ETA:         {duration(view.eta_seconds)}",
        f"Checkpoint:  {' '.join(filter(None, (_checkpoint(view, now), checkpoint_location(view))))}",
        *([f"Goodput:     {goodput_words(view.goodput)}"] if view.goodput else []),
        *([f"Last stop:   {stop_words(view.eviction)}"] if view.eviction else []),
        f"Age:         {duration((now - view.created).total_seconds()) if view.created else '-'}",
        "Conditions:",
    ]
    if not view.conditions:
        lines.append(f"  (none yet: {NO_OPERATOR})")
    for c in view.conditions:
        reason = f" {c['reason']}" if c.get("reason") else ""
        message = f": {c['message']}" if c.get("message") else ""
        lines.append(f"  {c.get('type')}={c.get('status')}{reason}{message}")
    if view.failures:
        lines.append("Failures:")
        lines.extend("  " + line for line in failure_table(view.failures))
    if view.avoided_nodes:
        lines.append("Avoided nodes:")
        lines.extend(f"  {avoided_line(a)}" for a in view.avoided_nodes)
    lines.append("Events:")
    recent = sorted(events, key=event_time_key)[-max_events:]
    if not recent:
        lines.append("  <none>")
    for e in recent:
        lines.append("  " + event_line(e, now))
    return lines


def placement_words(topology: dict[str, Any]) -> str:
    """status.admission.topology in a line: `1 example.com/rack: r3 (8 workers), on 8 hosts`."""
    domains = [d for d in topology.get("domains") or [] if isinstance(d, dict)]
    count = topology.get("domainCount") or len(domains)
    shown = ", ".join(f"{d.get('name')} ({d.get('workers')} workers)" for d in domains)
    more = f" and {count - len(domains)} more" if count > len(domains) else ""
    hosts = f", on {topology['hosts']} hosts" if topology.get("hosts") else ""
    return f"{count} {topology.get('level') or 'domain'}: {shown}{more}{hosts}"


def workers_words(view: JobView) -> str:
    """The workers running of those desired, and the world size they make of the job's:
    `2 of 3 running, 1 pending; world size 16 of 24`, the counts the Running condition
    says. An operator that counts no running workers: the active ones, as it said."""
    world = _or_dash(view.world_size)
    if view.running is None:
        return f"{_or_dash(view.nodes)}/{_or_dash(view.desired)} active, world size {world}"
    pending = (view.nodes or 0) - view.running
    words = f"{view.running} of {_or_dash(view.desired)} running" + (f", {pending} pending" if pending > 0 else "")
    running_world = view.running * view.nproc_per_node if view.nproc_per_node is not None else None
    if running_world is not None and running_world != view.world_size:
        world = f"{running_world} of {world}"
    return f"{words}; world size {world}"


def eval_words(view: JobView) -> str:
    """The latest evaluation: `step 40: loss 1.23, accuracy 0.912`."""
    named = [("loss", view.eval_loss)] if view.eval_loss is not None else []
    named += sorted(view.eval_metrics.items())
    return f"step {view.eval_step}: " + (", ".join(f"{k} {v:.6g}" for k, v in named) or "-")


HANDSHAKE_WORDS = {
    "Requested": "checkpointing now (last step seen {step}) before the pods go",
    "Checkpointed": "checkpointed step {step} before the pods went",
    "TimedOut": "no checkpoint within evictGraceSeconds: stopped with SIGTERM",
    "NotSupported": "the trainer took no checkpoint request: stopped with SIGTERM",
    "NotRunning": "no trainer was running",
    "Off": "evictGraceSeconds 0: stopped with SIGTERM",
    "Cancelled": "called off before the pods went",
}


def stop_words(ev: dict[str, Any]) -> str:
    """status.eviction in a line: why, how the handshake went, where it resumes, what it cost."""
    words = HANDSHAKE_WORDS.get(str(ev.get("handshake")), str(ev.get("handshake") or "-"))
    parts = [f"{ev.get('reason') or 'stopped'}: {words.format(step=ev.get('step'))}"]
    if ev.get("resumeFromStep") is not None:
        parts.append(f"resumes from step {ev['resumeFromStep']}")
    if ev.get("stepsLost") is not None:
        parts.append(f"{ev['stepsLost']} steps lost")
    return ", ".join(parts)


def event_time_key(event: dict[str, Any]) -> str:
    return (event.get("lastTimestamp") or event.get("eventTime") or event.get("firstTimestamp")
            or (event.get("metadata") or {}).get("creationTimestamp") or "")


def event_line(event: dict[str, Any], now: datetime) -> str:
    when = parse_time(event_time_key(event))
    age = duration((now - when).total_seconds()) if when else "-"
    count = event.get("count") or 1
    times = f" (x{count})" if count > 1 else ""
    message = " ".join(str(event.get("message") or "").split())
    return f"{age:>6}  {event.get('type', '-'):<7} {event.get('reason', '-')}{times}: {message}"


def _workers(v: JobView) -> str:
    """Running of desired (what the Running condition counts); an operator that counts no
    running workers: its active ones."""
    count = v.running if v.running is not None else v.nodes
    return f"{count if count is not None else '-'}/{v.desired if v.desired is not None else '-'}"


def _or_dash(value: Any) -> str:
    return "-" if value is None else str(value)


# A cell of each of the API's JOB_COLUMNS (the columns kubectl get shows, in its order):
# kubectl's value, or more of it where a terminal reads better (a bar, the checkpoint's age).
CELLS: dict[str, Callable[[JobView, datetime], str]] = {
    "Phase": lambda v, now: v.shown_phase,
    "Nodes": lambda v, now: _workers(v) if v.nodes is not None else "-",
    "World": lambda v, now: _or_dash(v.world_size),
    "Step": lambda v, now: _steps(v),
    "Progress": lambda v, now: bar(v.step, v.total_steps, width=10),
    "Samples/s": lambda v, now: _rate(v.samples_per_second),
    "Checkpoint": lambda v, now: _checkpoint(v, now).removeprefix("step "),
    "Restarts": lambda v, now: str(v.restarts),
    "Age": lambda v, now: duration((now - v.created).total_seconds()) if v.created else "-",
    "Strategy": lambda v, now: _or_dash(v.strategy),
    "Loss": lambda v, now: f"{v.loss:.4g}" if v.loss is not None else "-",
}


def top_table(views: list[JobView], now: datetime, all_namespaces: bool = False, *, headers: bool = True,
              wide: bool = False) -> list[str]:
    """`disttrain top` and `disttrain get`: one line per job, in the columns `kubectl get dt`
    shows (like kubectl: --no-headers drops the first line, -o wide adds columns)."""
    columns = [c.name for c in JOB_COLUMNS if wide or not c.wide]
    header = (("NAMESPACE",) if all_namespaces else ()) + ("NAME",) + tuple(c.upper() for c in columns)
    rows = [header]
    for v in sorted(views, key=lambda v: (v.namespace or "", v.name)):
        row = (v.name,) + tuple(CELLS[c](v, now) for c in columns)
        rows.append(((v.namespace or "-",) if all_namespaces else ()) + row)
    if len(rows) == 1:
        return []
    lines = aligned(rows)
    return lines if headers else lines[1:]


FAILURE_COLUMNS = ("TIME", "CAUSE", "WORKER", "NODE", "EXIT", "RESUMED FROM", "LOST", "MESSAGE")


def failure_table(failures: tuple[dict[str, Any], ...] | list[dict[str, Any]]) -> list[str]:
    """status.failures as `status NAME` prints it: a header, then one line each, oldest first."""
    def cell(value: Any) -> str:
        return "-" if value is None or value == "" else " ".join(str(value).split())

    rows = [FAILURE_COLUMNS] + [tuple(cell(f.get(k)) for k in ("time", "cause", "rank", "node", "exitCode",
                                                                "resumedFromStep", "stepsLost", "message"))
                                for f in failures]
    return aligned(rows)


def template_words(template: dict[str, Any]) -> str:
    """status.template in one line: the kind, the name and the generation the job keeps."""
    return (f"{template.get('kind')} {template.get('name')}, generation {template.get('generation')} "
            "(its defaults < this job's spec < its enforced settings)")


def goodput_words(goodput: dict[str, Any]) -> str:
    """status.goodput in one line: the ratio, then where the worker-seconds went; unknown
    while no step was measured (goodput.step unset), whatever an older operator wrote."""
    if goodput.get("step") is None:
        unmeasured = sum(float(goodput.get(key) or 0) for key in ("productiveSeconds", "restartingSeconds"))
        return (f"unknown: no step reported yet (unmeasured {duration(unmeasured)}, "
                f"lost {duration(float(goodput.get('lostSeconds') or 0))}, "
                f"waiting {duration(float(goodput.get('waitingSeconds') or 0))})")
    ratio = goodput.get("ratio")
    parts = ", ".join(f"{name} {duration(float(goodput.get(key) or 0))}" for name, key in (
        ("productive", "productiveSeconds"), ("lost", "lostSeconds"), ("restarting", "restartingSeconds"),
        ("waiting", "waitingSeconds")))
    return f"{'-' if ratio is None else f'{100 * float(ratio):.0f}%'} of worker time ({parts})"


def avoided_line(entry: dict[str, Any]) -> str:
    """One entry of status.avoidedNodes, in words."""
    line = f"{entry.get('node', '-')}: {entry.get('failures', '-')} failures, avoided since {entry.get('time', '-')}"
    if entry.get("liftedTime"):
        line += f"; no more since {entry['liftedTime']}: {entry.get('message') or '-'}"
    return line

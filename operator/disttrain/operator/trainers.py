"""Talking to the running trainers: their `/status`, read through the controller's second
queue (`polls`) so a slow or silent trainer never delays a reconcile, and the checkpoint
request of checkpoint-then-evict (core/eviction.py), sent once per stop in the background.
A report that moved, or an answer, queues the job for a pass."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from disttrain.api.report import parse_report
from disttrain.api.status_types import DistributedTrainingStatus as Status
from disttrain.operator.core.backoff import exponential
from disttrain.operator.core.pods import PodInfo
from disttrain.operator.core.state import TRAINING_PHASES, JobState
from disttrain.operator.core.status import status_sources
from disttrain.operator.record import JobRecord, Key, moved

if TYPE_CHECKING:
    from disttrain.operator.controller import Controller

log = logging.getLogger("disttrain.controller")

# A trainer that does not answer /status is asked at most this rarely.
SILENT_TRAINER_MAX_SECONDS = 120.0


def silent_poll_seconds(period: float, silent: int) -> float:
    """The wait before the next /status poll after `silent` unanswered ones in a row:
    the period, doubling from the second miss, capped (the first miss may be a restart)."""
    if silent <= 1:
        return period
    return exponential(period, max(period, SILENT_TRAINER_MAX_SECONDS), silent)


class Trainers:
    """The controller's (`shell`) link to its jobs' trainers."""

    def __init__(self, shell: Controller):
        self.shell = shell

    async def poll(self, key: Key) -> float | None:
        """Read a ready trainer's /status; queue the job when the report moved. Returns when
        to poll again: the period, longer and longer while the trainer stays silent (a
        script without a status server, a network policy in the way), None once the job is
        no longer running (its next pass that runs schedules the poll again)."""
        shell = self.shell
        view = shell.jobs.get(key)
        rec = shell.records.get(view.uid) if view is not None else None
        if rec is None or rec.validation is None or not rec.validation[1].ok:
            return None
        phase = rec.last_status.phase if rec.last_status is not None else view.status.get("phase")  # type: ignore[union-attr]
        if phase not in TRAINING_PHASES:
            return None
        port = rec.validation[1].job.spec.metrics.port
        own = [p for p in shell.observed(key) if p.owner_uid == rec.uid]
        sources = status_sources(own)
        if not sources:
            # No worker is ready to be asked yet (a pod Running before its readiness
            # probe passes): that is no silence of the trainer's, so no back-off.
            return shell.settings.progress_seconds
        report = None
        for pod in sources:
            report = parse_report(await shell.kube.trainer_status(pod.ip, port))
            if report is not None:
                break
        rec.silent_polls = 0 if report is not None else rec.silent_polls + 1
        if report is not None and moved(rec.report, report):
            rec.report = report
            shell.queue.add(key)
        return silent_poll_seconds(shell.settings.progress_seconds, rec.silent_polls)

    @staticmethod
    def checkpoint_refused(status: Status, rec: JobRecord) -> str | None:
        """Why the trainer did not take the checkpoint request of the stop in progress."""
        ev = status.eviction
        return rec.checkpoint_refused if ev is not None and rec.asked_checkpoint == ev.request_time else None

    def ask_checkpoint(self, stop: str | None, ask: tuple[int, float], job: JobState, pods: list[PodInfo],
                        rec: JobRecord) -> None:
        """Ask a ready worker for a checkpoint before the job stops (eviction.py), once per
        stop, in the background: the answer (its report, or why it refused) queues the job."""
        if rec.asked_checkpoint == stop:
            return
        rec.asked_checkpoint, rec.checkpoint_refused = stop, None
        shell, key = self.shell, (job.namespace, job.name)
        port = job.validation.job.spec.metrics.port
        hold, wait = ask
        sources = [p for p in status_sources(pods) if p.uid]

        async def ask_one() -> None:
            answer, refused = None, "no ready worker to ask"
            for pod in sources:  # the first that answers; through it the request reaches every rank
                answer, refused, answered = await shell.kube.trainer_checkpoint(pod.ip, port, pod.uid, hold, wait)
                if answered:
                    break
            report = parse_report(answer) if answer is not None else None
            if rec.asked_checkpoint != stop:
                return  # a newer stop (or none) by now
            if report is not None:
                rec.report = report
            else:
                rec.checkpoint_refused = refused or "POST /checkpoint answered no report"
                log.info("%s/%s: the trainer did not take the checkpoint request: %s", *key, rec.checkpoint_refused)
            shell.queue.add(key)

        shell.spawn(ask_one())

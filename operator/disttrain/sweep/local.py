"""Trials as `disttrain run --local` jobs: the same machinery (disttrain.local), one workdir per
trial job under the sweep's folder, so an interrupted trial resumes from its checkpoint."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from disttrain.api.report import parse_report
from disttrain.api.validate import validate_document
from disttrain.local.run import run_local_job
from disttrain.sweep.runner import JobResult, Watch, finished, objective_points


class LocalBackend:
    def __init__(self, root: Path, *, stopping: threading.Event, parallelism: int = 1,
                 poll_seconds: float = 0.2) -> None:
        self.root = root
        self.stopping = stopping
        # The CPUs split over the trials that run at once, as separate pods' limits would.
        self.cpus = max(1, (os.cpu_count() or 1) // parallelism)
        self.poll_seconds = poll_seconds

    def run(self, job: dict[str, Any], watch: Watch, metric: str) -> JobResult:
        result = validate_document(job)
        if not result.ok:
            return JobResult("failed", message="; ".join(str(e) for e in result.errors))
        name = result.job.name
        log = self.root / name / "run.log"  # the local run's own lines: start, summary, failures
        log.parent.mkdir(parents=True, exist_ok=True)
        why: list[str] = []

        def poll(status: dict[str, Any]) -> bool:
            if self.stopping.is_set():
                why.append("interrupted")
                return True
            report = parse_report(status)
            points = objective_points(report, metric)
            if points and watch(points, report.total_steps if report else None):
                why.append("stopped")
                return True
            return False

        with log.open("a", encoding="utf-8") as out:
            outcome = run_local_job(result.job, result.resolved, workdir=self.root, progress=False, out=out,
                                    poll_seconds=self.poll_seconds, cpus=self.cpus, watch=poll)
        final = outcome.final
        history = objective_points(final, metric)
        if why:
            return JobResult("interrupted" if why[0] == "interrupted" else "stopped", eval_history=history)
        if outcome.code != 0 or final is None or not final.finished:
            return JobResult("failed", eval_history=history,
                             message=f"exit {outcome.code}, outcome {final.outcome if final else 'none'}; see {log}")
        return finished(final, metric)

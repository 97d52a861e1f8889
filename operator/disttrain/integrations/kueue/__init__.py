"""Kueue: the Workload a queued job is admitted through (`workload`), its conditions and
the quota a job may use (docs/operations.md, "Queueing with Kueue")."""

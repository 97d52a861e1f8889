"""Timestamps as the Kubernetes API writes them (RFC 3339, seconds, UTC)."""

from __future__ import annotations

from datetime import datetime, timezone


def iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None

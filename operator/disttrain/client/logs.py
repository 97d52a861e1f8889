"""The trainers' log lines: one per line of a worker's container, ordered across
workers by the kubelet's stamps, or merged as they come when followed."""

from __future__ import annotations

import math
import queue
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from disttrain.api.names import INDEX_LABEL
from disttrain.client.errors import InvalidArgument


@dataclass(frozen=True, slots=True)
class LogLine:
    worker: int | None
    text: str
    time: str = ""  # RFC 3339 from the kubelet; orders lines across workers

    def __iter__(self) -> Iterator[Any]:  # `for worker, line in client.logs(...)`
        return iter((self.worker, self.text))



def on_kwok(node: Any) -> bool:
    """Is this Node (the client's object) one of KWOK's fake nodes? hack/cluster.sh makes
    them as KWOK manages them: annotated kwok.x-k8s.io/node=fake, labelled type=kwok."""
    meta = node.metadata
    return (meta.annotations or {}).get("kwok.x-k8s.io/node") == "fake" or (meta.labels or {}).get("type") == "kwok"


def simulated(pod: str, node: str) -> str:
    """The error for reading the log of a pod on a KWOK node: there is no container to log."""
    return (f"error: {pod} runs on {node}, a KWOK node: its pods are simulated and write no logs; "
            "read them on a cluster with real nodes (docs/local-cluster.md)")


def since_seconds(since: float) -> int:
    """The whole seconds a log's `since` asks the API server for: rounded up, as kubectl
    does, so a line of the last `since` seconds is never left out."""
    if since <= 0:
        raise InvalidArgument(f"since {since}: give seconds > 0")
    return math.ceil(since)



_STAMP = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)")


def log_time_order(stamp: str) -> tuple[int, int, int]:
    """A sort key for the kubelet's RFC 3339 log stamps. Compared as text they misorder:
    Go trims a fraction's trailing zeros, so "...:20.12Z" sorts after "...:20.123Z" and
    "...:20Z" after "...:20.5Z". Nanoseconds are kept (datetime keeps microseconds). A
    stamp that does not parse sorts after every one that does."""
    match = _STAMP.fullmatch(stamp)
    if match is None:
        return (1, 0, 0)
    zone = "+00:00" if match[3] == "Z" else match[3]
    seconds = int(datetime.fromisoformat(match[1] + zone).timestamp())
    return (0, seconds, int((match[2] or "").ljust(9, "0")))


def worker_of(pod: Any) -> int | None:
    value = (pod.metadata.labels or {}).get(INDEX_LABEL)
    return int(value) if value is not None and value.isdigit() else None



def merged(sources: list[Any]) -> Iterator[LogLine]:
    """Lines of several generators, as they come, from one thread each."""
    lines: queue.Queue[Any] = queue.Queue(maxsize=1000)
    done = object()

    def pump(source: Any) -> None:
        try:
            for line in source():
                lines.put(line)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread, raised there
            lines.put(exc)
        finally:
            lines.put(done)

    threads = [threading.Thread(target=pump, args=(s,), daemon=True) for s in sources]
    for thread in threads:
        thread.start()
    running = len(threads)
    while running:
        item = lines.get()
        if item is done:
            running -= 1
        elif isinstance(item, BaseException):
            raise item
        else:
            yield item

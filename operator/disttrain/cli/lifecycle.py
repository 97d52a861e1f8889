"""`disttrain suspend`, `resume` and `delete`: on each NAME, every job (--all) or those -l
selects."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from disttrain.cli.cluster import client_error, client_for, job_names, none_found, program_name, ref, usage_error
from disttrain.cli.registry import Command, register


def for_each_job(args: argparse.Namespace, act: Callable[[Any, str], Any], done: Callable[[str, Any], str]) -> int:
    """suspend, resume and delete: on each NAME, or every job (--all) or those -l
    selects; every job is tried, one line per failure, exit 1 if any failed.
    --ignore-not-found skips names that do not exist, like kubectl's."""
    from disttrain.client.errors import NotFound

    if args.names and (args.all or args.selector):
        return usage_error("give NAMEs or --all/-l, not both")
    if not (args.names or args.all or args.selector):
        return usage_error(f"name a job, or pass --all or -l SELECTOR (see {program_name()} {args.command} -h)")
    client = client_for(args)
    names = args.names or [o["metadata"]["name"] for o in client.list(selector=args.selector)]
    if not names:
        print(none_found(client), file=sys.stderr)
    failed = False
    for name in dict.fromkeys(names):
        try:
            result = act(client, name)
        except NotFound as exc:
            if not args.ignore_not_found:
                print(exc, file=sys.stderr)
                failed = True
            continue
        except client_error() as exc:
            print(exc, file=sys.stderr)
            failed = True
            continue
        print(done(name, result), flush=True)
    return 1 if failed else 0


def cmd_suspend(args: argparse.Namespace) -> int:
    from disttrain.client.jobview import suspend_words

    return for_each_job(args, lambda c, name: c.suspend(name),
                        lambda name, obj: f"{ref(name)} suspended ({suspend_words(obj)})")


def cmd_resume(args: argparse.Namespace) -> int:
    return for_each_job(args, lambda c, name: c.resume(name), lambda name, _: f"{ref(name)} resumed")


def cmd_delete(args: argparse.Namespace) -> int:
    from disttrain.client.errors import OBJECT

    return for_each_job(args, lambda c, name: c.delete(name, wait=args.wait), lambda name, _: f'{OBJECT} "{name}" deleted')


def _setup_targets(p: argparse.ArgumentParser) -> None:
    p.add_argument("names", nargs="*", metavar="NAME", help="the DistributedTrainings' names"
                   ).completer = job_names  # type: ignore[attr-defined]
    p.add_argument("--all", action="store_true", help="every job in the namespace")
    p.add_argument("-l", "--selector", help="the jobs with these labels, like kubectl -l")
    p.add_argument("--ignore-not-found", action="store_true", help="a NAME that does not exist is not an error")


def _setup_delete(p: argparse.ArgumentParser) -> None:
    _setup_targets(p)
    p.add_argument("--wait", action="store_true", help="return once the job and its pods are gone")


register(Command("suspend", "suspend the job: delete its pods, keep the job and its checkpoints",
                 "suspend my-job", _setup_targets, cmd_suspend, cluster=True))
register(Command("resume", "resume a suspended job from its newest checkpoint", "resume my-job",
                 _setup_targets, cmd_resume, cluster=True))
register(Command("delete", "delete the job and its pods", "delete my-job", _setup_delete, cmd_delete, cluster=True))

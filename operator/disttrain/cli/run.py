"""`disttrain run --local FILE`: the file's one job, validated, run on this machine
(disttrain.local)."""

from __future__ import annotations

import argparse
import sys

from disttrain.api.validate import validate_document
from disttrain.cli.job_files import print_report, read_jobs, report
from disttrain.cli.registry import Command, register


def cmd_run(args: argparse.Namespace) -> int:
    documents = read_jobs(args.file)
    if documents is None:
        return 1
    if len(documents) != 1:
        print(f"{args.file}: holds {len(documents)} DistributedTrainings; run --local takes one "
              "per call", file=sys.stderr)
        return 1
    doc = documents[0]
    result = validate_document(doc.data)
    entry = report(doc, result)
    print_report(entry, sys.stderr)
    if not result.ok:
        return 1
    from disttrain.local.run import run_local  # needs torch: imported only for this command

    return run_local(result.job, result.resolved, workdir=args.workdir,
                     progress=not args.no_progress, checkpoint_uri=args.checkpoint_uri)


def _setup_run(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE")
    p.add_argument("--local", action="store_true", required=True,
                   help="start one torchrun agent per node on this machine")
    p.add_argument("--workdir", default=".disttrain",
                   help="where checkpoints and logs go (default: ./.disttrain/<job>)")
    p.add_argument("--checkpoint-uri", metavar="S3_URI", type=_checkpoint_uri,
                   help="write checkpoints to this object-store prefix instead (s3://bucket/prefix; credentials "
                        "and endpoint from your AWS_* environment, as any AWS SDK reads them)")
    p.add_argument("--no-progress", action="store_true", help="plain log lines, no progress bar")


def _checkpoint_uri(value: str) -> str:
    """--checkpoint-uri checked as spec.checkpoint.uri is, with the same words."""
    from disttrain.api.meta import matches
    from disttrain.api.types import S3_URI

    if not matches(S3_URI, value):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not an object-store prefix: write s3://<bucket>/<prefix>, the bucket 3-63 lowercase "
            "letters, digits, '.' or '-'")
    return value


register(Command("run", "run a job on this machine (--local), no cluster needed", "run --local job.yaml",
                 _setup_run, cmd_run, needs=("torch", "numpy", "prometheus_client")))

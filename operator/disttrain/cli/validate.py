"""`disttrain validate FILE...`: check files offline with the operator's rules."""

from __future__ import annotations

import argparse
import sys

from disttrain.cli.job_files import TEMPLATE_HELP, print_report, report, template_of, unusable, validated_jobs
from disttrain.cli.output import dump
from disttrain.cli.registry import Command, register


def cmd_validate(args: argparse.Namespace) -> int:
    template = template_of(args)
    if template is False:
        return 1
    checked = list(validated_jobs(args.files, template=template))
    if args.output == "text":  # a file it could not use was named on stderr already
        for doc, result in checked:
            if doc is not None:
                print_report(report(doc, result), sys.stdout)
    else:
        dump([report(doc, result) if doc is not None else unusable(result.errors[0]) for doc, result in checked],
             args.output, sys.stdout)
    return 0 if all(result.ok for _, result in checked) else 1


def _setup_validate(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text")
    p.add_argument("--template", metavar="FILE", help=TEMPLATE_HELP + "; says where each setting came from")


register(Command("validate", "check files offline with the operator's rules", "validate job.yaml",
                 _setup_validate, cmd_validate))

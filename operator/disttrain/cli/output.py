"""How commands print objects: YAML or JSON (`dump`), and jobs as `get -o FORMAT` prints
them (a table, names, JSONPath, custom columns, one job's status)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from disttrain.cli.cluster import now, ref
from disttrain.client.documents import dump_yaml


def dump(data: Any, fmt: str, out: TextIO, multi: bool = False) -> None:
    if fmt == "json":
        json.dump(data, out, indent=2)
        out.write("\n")
    else:
        dump_yaml(data, out, multi=multi)


GET_FORMATS = ("text", "wide", "name", "json", "yaml")


TEMPLATE_FORMATS = ("jsonpath", "custom-columns")


def output_format(text: str) -> str:
    """-o: one of GET_FORMATS, or jsonpath=TEMPLATE / custom-columns=SPEC (checked now,
    so a bad template is a usage error before anything is asked of the cluster)."""
    from disttrain.client.jsonpath import JSONPathError, parse_columns, parse_template

    kind, sep, template = text.partition("=")
    if text in GET_FORMATS:
        return text
    if sep and kind in TEMPLATE_FORMATS:
        try:
            parse_template(template) if kind == "jsonpath" else parse_columns(template)
        except JSONPathError as exc:
            raise argparse.ArgumentTypeError(f"{kind}: {exc}") from None
        return text
    raise argparse.ArgumentTypeError(
        f"unable to match a printer suitable for the output format {text!r}, allowed formats are: "
        f"{', '.join(GET_FORMATS)}, jsonpath=TEMPLATE, custom-columns=HEADER:PATH,...")


def print_objects(objs: list[dict[str, Any]], args: argparse.Namespace, *, listing: bool, headers: bool = True,
                  events: list[dict[str, Any]] | None = None) -> None:
    """Jobs as `get -o FORMAT` prints them: a list (listing) or one job; in a watch each
    change is one call with headers=False."""
    from disttrain.client.jobview import status_lines, top_table, view_of
    from disttrain.client.jsonpath import column_rows, parse_columns, render

    kind, _, template = args.output.partition("=")
    if kind in ("json", "yaml"):
        if listing and headers:
            dump({"apiVersion": "v1", "kind": "List", "items": objs}, kind, sys.stdout)
        else:
            for obj in objs:
                if listing and kind == "yaml":  # a watch: a document per change, a stream that parses
                    sys.stdout.write("---\n")
                dump(obj, kind, sys.stdout)
    elif kind == "name":
        for obj in objs:
            print(ref(obj["metadata"]["name"]))
    elif kind == "jsonpath":
        for target in ([{"apiVersion": "v1", "kind": "List", "items": objs}] if listing and headers else objs):
            sys.stdout.write(render(template, target))
        sys.stdout.flush()
    elif kind == "custom-columns":
        lines = column_rows(parse_columns(template), objs, headers=headers and not args.no_headers)
        print("\n".join(lines))
    elif not listing:
        print("\n".join(status_lines(view_of(objs[0]), events or [], now())))
    else:
        lines = top_table([view_of(o) for o in objs], now(), args.all_namespaces,
                          headers=headers and not args.no_headers, wide=kind == "wide")
        print("\n".join(lines))
    sys.stdout.flush()

# PYTHON_ARGCOMPLETE_OK
"""`disttrain` (also installed as `kubectl-disttrain`, so `kubectl disttrain` finds it).

Offline: validate, render, crd, docs and `run --local` print the same errors and warnings
the operator writes to status and Events. In a cluster: submit, get/status, logs, wait,
suspend, resume, delete and top, all through the Python client (client.py).

Exit codes: 0 ok; 1 invalid input or a failed operation (an API error, no cluster, a job
that Failed while waited for); 2 usage errors (argparse); 124 `wait` timed out; 130
interrupted. Commands are rows of COMMANDS: add one with `register(Command(...))`.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, TextIO

import yaml

from disttrain.api import schema
from disttrain.api import types as t
from disttrain.api.defaults import Images
from disttrain.api.errors import FieldError
from disttrain.api.validate import Validation, validate_document
from disttrain.cli.documents import Document, DocumentError, describe, is_distributed_training, load_documents
from disttrain.cli.templates import load_template, print_sources, resolved_document, unresolved
from disttrain.integrations.kueue.workload import QUEUE_LABEL, queue_of
from disttrain.integrations.registry import owned_children
from disttrain.render import render_pod
from disttrain.sweep import command as sweep_command


@dataclass(frozen=True, slots=True)
class Command:
    """One subcommand: its arguments (setup), what it does (run), and the example the
    top-level --help shows."""

    name: str
    help: str
    example: str
    setup: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    cluster: bool = False  # takes -n, --context, --kubeconfig
    needs: tuple[str, ...] = ()  # optional packages (EXTRAS) it cannot start without

    def missing(self) -> str | None:
        """The first package this command needs that is not installed."""
        wanted = ("kubernetes",) * self.cluster + self.needs
        return next((m for m in wanted if importlib.util.find_spec(m) is None), None)


# The optional packages and the pyproject extra that installs each.
EXTRAS = {"kubernetes": "cli", "optuna": "sweep", "torch": "local", "numpy": "local",
          "prometheus_client": "local", "tqdm": "local"}


def needs_package(command: str, module: str) -> str:
    return (f"error: disttrain {command} needs the Python package {module!r}, which this installation "
            f"lacks: pip install 'disttrain[{EXTRAS[module]}]'")


COMMANDS: list[Command] = []


def register(command: Command) -> Command:
    COMMANDS.append(command)
    return command


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    _autocomplete(parser)
    args = parser.parse_args(argv)
    command = args.command_spec
    absent = command.missing()
    if absent:  # before anything starts: never a ModuleNotFoundError half-way through
        print(needs_package(command.name, absent), file=sys.stderr)
        return 1
    try:
        return args.func(args)
    except ModuleNotFoundError as exc:  # an optional package a branch of the command needs
        if (exc.name or "").split(".")[0] not in EXTRAS:
            raise
        print(needs_package(command.name, exc.name.split(".")[0]), file=sys.stderr)
        return 1
    except BrokenPipeError:  # `disttrain render x.yaml | head`
        return 0
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except _client_error() as exc:  # one line, kubectl's words, no traceback
        print(exc, file=sys.stderr)
        return exc.exit_code


def _client_error() -> type[Exception]:
    """DisttrainError, imported only once a cluster command has imported the client."""
    module = sys.modules.get("disttrain.client.client")
    return module.DisttrainError if module else _NeverRaised


class _NeverRaised(Exception):
    exit_code = 1


def program_name() -> str:
    """`kubectl disttrain` when kubectl runs us as the plugin kubectl-disttrain."""
    return "kubectl disttrain" if os.path.basename(sys.argv[0]).startswith("kubectl-") else "disttrain"


def build_parser() -> argparse.ArgumentParser:
    return parsers()[0]


def parsers(prog: str | None = None, columns: int | None = None
            ) -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The whole command line and each command's own parser; `columns` fixes the width
    --help wraps at (else the terminal's)."""
    prog = prog or program_name()
    formatter = functools.partial(argparse.RawDescriptionHelpFormatter, width=columns)
    width = max(len(c.name) for c in COMMANDS)
    examples = "\n".join(f"  {c.name:<{width}}  {prog} {c.example}" for c in COMMANDS)
    parser = argparse.ArgumentParser(
        prog=prog, formatter_class=formatter,
        description="Validate, render and run DistributedTraining jobs; submit and follow them in a cluster.",
        epilog=f"examples:\n{examples}\n\nexit codes: 0 ok, 1 failed (invalid file, API error, no cluster, "
               f"job Failed), 2 usage, 124 wait timed out, 130 interrupted.\nMore: docs/cli.md")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    own = {}
    for command in COMMANDS:
        p = own[command.name] = sub.add_parser(command.name, help=command.help,
                           description=f"{command.help}.\n\nexample:\n  {prog} {command.example}",
                           formatter_class=formatter)
        if command.cluster:
            _cluster_options(p)
        command.setup(p)
        p.set_defaults(func=command.run, command_spec=command)
    return parser, own


def _cluster_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--namespace", help="the namespace (default: the kubeconfig context's, else default)")
    p.add_argument("--context", help="the kubeconfig context to use (default: the current one)")
    p.add_argument("--kubeconfig", help="path of the kubeconfig (default: $KUBECONFIG, else ~/.kube/config)")
    p.add_argument("--request-timeout", type=_duration, metavar="DURATION",
                   help="how long one request may take, like kubectl's (30s, 1m, or seconds; 0: no limit; "
                        "default 10 s to connect, 60 s to answer); watches and -f are not bounded by it")


def _duration(text: str) -> float:
    from disttrain.client.jobview import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _autocomplete(parser: argparse.ArgumentParser) -> None:
    """Shell completion (docs/cli.md); does nothing unless the shell asks for it."""
    if "_ARGCOMPLETE" in os.environ:
        import argcomplete

        argcomplete.autocomplete(parser)


COMPLETION_TIMEOUT = 2.0  # seconds a completion of job names may ask the cluster for


# Cobra's shell-completion directives, which kubectl reads from a plugin's completer.
NO_SPACE, NO_FILE_COMPLETION = 2, 4


def kubectl_complete(argv: list[str] | None = None) -> int:
    """`kubectl_complete-disttrain ARG... WORD`: kubectl (1.26+) runs it on `kubectl
    disttrain ARG... WORD<TAB>` and offers what it prints: one candidate a line, then
    `:DIRECTIVE` (Cobra's). The candidates are argcomplete's, from the same parser the
    shell completion of `disttrain` uses, driven through argcomplete's documented
    environment (COMP_LINE, COMP_POINT, _ARGCOMPLETE)."""
    import io
    import shlex

    import argcomplete
    import argcomplete.io

    class _QuietFinder(argcomplete.CompletionFinder):
        def _init_debug_stream(self) -> None:
            """argcomplete's hook for this (its docstring): its default opens file descriptor
            9 for debug output, which here is no shell's, and may be any file of a process
            that calls this function (a test's, an IDE's). Its debug lines (_ARC_DEBUG) go
            to the stderr of now."""
            argcomplete.io.debug_stream = sys.stderr

    words = list(sys.argv[1:] if argv is None else argv) or [""]
    # Quoted, each word stays one word (" y", "it's"); argcomplete reads a quoted word as the word.
    line = " ".join(["disttrain", *map(shlex.quote, words)])
    out = io.StringIO()
    saved = {k: os.environ.get(k) for k in ("_ARGCOMPLETE", "COMP_LINE", "COMP_POINT", "_ARGCOMPLETE_IFS")}
    os.environ.update(_ARGCOMPLETE="1", COMP_LINE=line, COMP_POINT=str(len(line)), _ARGCOMPLETE_IFS="\n")
    try:
        _QuietFinder()(build_parser(), output_stream=out, exit_method=lambda code: None)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    candidates = [c.rstrip(" ") for c in out.getvalue().split("\n") if c.strip()]
    # `-o jsonpath=`, a directory: the word goes on, so the shell must not add a space.
    directive = NO_FILE_COMPLETION | (NO_SPACE if any(c.endswith(("=", "/")) for c in candidates) else 0)
    for candidate in candidates:
        print(candidate)
    print(f":{directive}")
    return 0


def _job_names(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
    """Completer: the names of the jobs in the namespace, or none when the cluster is away."""
    from disttrain.client.client import Client, DisttrainError

    try:
        # A shell waits on this: a cluster that is away must not hold the prompt for long.
        client = Client(getattr(parsed_args, "namespace", None), context=getattr(parsed_args, "context", None),
                        kubeconfig=getattr(parsed_args, "kubeconfig", None), request_timeout=COMPLETION_TIMEOUT)
        return [o["metadata"]["name"] for o in client.list() if o["metadata"]["name"].startswith(prefix)]
    except DisttrainError:
        return []


def _job_argument(p: argparse.ArgumentParser, nargs: str | None = None) -> None:
    p.add_argument("name", nargs=nargs, metavar="NAME", help="the DistributedTraining's name"
                   ).completer = _job_names  # type: ignore[attr-defined]


# ---- validate -----------------------------------------------------------------------


def cmd_validate(args: argparse.Namespace) -> int:
    template = _template(args)
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


def _template(args: argparse.Namespace):
    """The --template file's template, None without one; False after printing why it
    cannot be used."""
    if not getattr(args, "template", None):
        return None
    try:
        return load_template(args.template)
    except DocumentError as exc:
        print(exc, file=sys.stderr)
        return False


def validated_jobs(paths: list[str], namespace: str | None = None, template=None):
    """(document, validation) for every job in the files, resolved against `template`
    first when there is one; (None, failed) for a file that cannot be read, after
    printing its one-line error."""
    for path in paths:
        try:
            documents = _jobs_in(path)
        except DocumentError as exc:
            print(exc, file=sys.stderr)
            yield None, Validation(None, None, [FieldError(path, None, str(exc))])
            continue
        for doc in documents:
            data = doc.data
            if namespace:
                data = {**data, "metadata": {**(data.get("metadata") or {}), "namespace": namespace}}
            note = unresolved(data) if template is None else None
            data, refused, doc.template = resolved_document(template, data)
            result = validate_document(data, images=Images.from_env(os.environ))
            if refused or note:
                result = Validation(result.job if not refused else None, result.resolved if not refused else None,
                                    [*refused, *result.errors], [*([note] if note else []), *result.warnings])
            yield doc, result


def unusable(error: FieldError) -> dict[str, Any]:
    """The -o json/yaml entry of a file that could not be read or holds no job: programs
    reading the output see the file and why, as they would see an invalid job."""
    return {"file": error.path, "line": None, "name": None, "valid": False, "warnings": [],
            "errors": [{"field": None, "message": error.problem, "line": None}]}


def report(doc: Document, result: Validation) -> dict[str, Any]:
    metadata = doc.data.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    name = name if isinstance(name, str) and len(name) <= 253 else None
    entry: dict[str, Any] = {"file": doc.path, "line": doc.line, "name": name, "valid": result.ok}
    if result.resolved is not None:
        r = result.resolved
        entry["resolved"] = {"strategy": r.strategy, "nodes": r.nodes, "minNodes": r.min_nodes,
                             "maxNodes": r.max_nodes, "nprocPerNode": r.nproc_per_node,
                             "worldSize": r.world_size, "precision": r.precision}
        entry["gpusPerNode"] = result.job.spec.gpus_per_node
        entry["queue"] = queue_of(result.job.labels)
    if doc.template is not None:
        entry["template"] = doc.template
    entry["warnings"] = [{"reason": w.reason, "field": w.path, "message": w.message,
                          "line": doc.line_of(w.path)} for w in result.warnings]
    entry["errors"] = [{"field": e.path, "message": str(e), "line": doc.line_of(e.path)}
                       for e in result.errors]
    return entry


def print_report(entry: dict[str, Any], out: TextIO) -> None:
    where = f"{entry['file']}:{entry['line']}"
    if entry["valid"]:
        r = entry["resolved"]
        elastic = (_count(r["nodes"], "node") if r["minNodes"] == r["maxNodes"] == r["nodes"]
                   else f"{_count(r['nodes'], 'node')} (elastic {r['minNodes']}..{r['maxNodes']})")
        device = _count(entry["gpusPerNode"], "GPU") if entry["gpusPerNode"] else "CPU"
        print(f"{where}: {entry['name']}: valid", file=out)
        print(f"  topology: {elastic} x {_count(r['nprocPerNode'], 'process', 'processes')} = world size "
              f"{r['worldSize']}, strategy {r['strategy']}, precision {r['precision']}, "
              f"{device} per node", file=out)
        if entry.get("queue"):
            print(f"  queue: Kueue LocalQueue {entry['queue']} ({QUEUE_LABEL}): held, no worker created, until Kueue "
                  "admits its Workload (an operator run with DISTTRAIN_KUEUE)", file=out)
    else:
        print(f"{where}: {entry['name'] or '(unnamed)'}: invalid", file=out)
    if entry.get("template"):
        print_sources(entry["template"], out)
    for w in entry["warnings"]:
        print(f"  {entry['file']}:{w['line']}: warning [{w['reason']}] {w['field']}: {w['message']}", file=out)
    for e in entry["errors"]:
        print(f"  {entry['file']}:{e['line']}: error: {e['message']}", file=out)


def _count(n: int, word: str, plural: str | None = None) -> str:
    return f"{n} {word if n == 1 else plural or word + 's'}"


def _jobs_in(path: str) -> list[Document]:
    """The DistributedTraining documents of a file; other kinds are noted and skipped."""
    documents = load_documents(path)
    jobs = [d for d in documents if is_distributed_training(d.data)]
    for d in documents:
        if not is_distributed_training(d.data):
            print(f"{d.label}: skipping {describe(d.data)}: not a DistributedTraining",
                  file=sys.stderr)
    if not jobs:
        raise DocumentError(f"{path}:1: no DistributedTraining in this file (expected "
                            "apiVersion: disttrain.dev/v1alpha1, kind: DistributedTraining)")
    return jobs


def _read_jobs(path: str) -> list[Document] | None:
    """The jobs of one file, or None after printing why it cannot be read."""
    try:
        return _jobs_in(path)
    except DocumentError as exc:
        print(exc, file=sys.stderr)
        return None


# ---- render, crd --------------------------------------------------------------------


def cmd_render(args: argparse.Namespace) -> int:
    from disttrain.render.network_policy import network_policy_from_env

    objects, failed = [], False
    environ = {**os.environ, "DISTTRAIN_OPERATOR_NAMESPACE": args.operator_namespace}
    if args.no_network_policy:
        environ["DISTTRAIN_NETWORK_POLICY"] = "false"
    try:  # the operator's own settings, read from the same variables (docs/operations.md)
        network_policy = network_policy_from_env(environ)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    template = _template(args)
    if template is False:
        return 1
    for doc, result in validated_jobs(args.files, args.namespace, template):
        if not result.ok:
            failed = True
            if doc is not None:
                print_report(report(doc, result), sys.stderr)
            continue
        for w in report(doc, result)["warnings"]:
            print(f"{doc.path}:{w['line']}: warning [{w['reason']}] {w['field']}: {w['message']}",
                  file=sys.stderr)
        job, resolved = result.job, result.resolved
        objects.extend(owned_children(job, resolved, network_policy))  # the operator's order, then its pods
        objects.extend(render_pod(job, resolved, i) for i in range(resolved.nodes))
    if failed:
        return 1
    dump(objects, args.output, sys.stdout, multi=True)
    return 0


def cmd_crd(args: argparse.Namespace) -> int:
    dump(schema.crd() if args.kind == t.KIND else schema.template_crd(args.kind), args.output, sys.stdout)
    return 0


def cmd_docs(args: argparse.Namespace) -> int:
    from disttrain.api.reference import api_reference

    sys.stdout.write(api_reference() if args.topic == "api" else cli_reference())
    return 0


# The width docs/cli-reference.md is wrapped at, whatever the terminal that writes it.
REFERENCE_COLUMNS = 100


def cli_reference() -> str:
    """docs/cli-reference.md: every command's --help, as `disttrain` prints it."""
    parser, commands = parsers(prog="disttrain", columns=REFERENCE_COLUMNS)
    parts = ["# `disttrain` command reference\n\n"
             "Every command's `--help`, generated by `disttrain docs cli` (`make crd` writes this file). "
             "What the commands do, with examples: [cli.md](cli.md).\n\n"
             "```text\n" + parser.format_help() + "```\n"]
    for command in COMMANDS:
        parts.append(f"\n## {command.name}\n\n```text\n{commands[command.name].format_help()}```\n")
    return "".join(parts)


def cmd_version(args: argparse.Namespace) -> int:
    from disttrain import __version__

    info = {"disttrain": __version__, "api": f"{t.GROUP}/{t.VERSION}",
            "python": ".".join(map(str, sys.version_info[:3]))}
    if args.output == "text":
        print(f"disttrain {info['disttrain']} (API {info['api']}, Python {info['python']})")
    else:
        dump(info, args.output, sys.stdout)
    return 0


def _setup_version(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", choices=("text", "yaml", "json"), default="text",
                   help="yaml, json: the same three fields as one object")


COMPLETION_SHELLS = ("bash", "zsh", "fish")


def cmd_completion(args: argparse.Namespace) -> int:
    import argcomplete

    sys.stdout.write(argcomplete.shellcode(["disttrain", "kubectl-disttrain"], shell=args.shell))
    return 0


def _setup_completion(p: argparse.ArgumentParser) -> None:
    p.add_argument("shell", choices=COMPLETION_SHELLS, help="the shell to print the completion script for")


def dump(data: Any, fmt: str, out: TextIO, multi: bool = False) -> None:
    if fmt == "json":
        json.dump(data, out, indent=2)
        out.write("\n")
    elif multi:
        yaml.safe_dump_all(data, out, sort_keys=False, width=100)
    else:
        yaml.safe_dump(data, out, sort_keys=False, width=100)


# ---- run --local --------------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    documents = _read_jobs(args.file)
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
    from disttrain.cli.local_run import run_local  # needs torch: imported only for this command

    return run_local(result.job, result.resolved, workdir=args.workdir,
                     progress=not args.no_progress, checkpoint_uri=args.checkpoint_uri)


# ---- in a cluster -------------------------------------------------------------------


def _client(args: argparse.Namespace) -> Any:
    from disttrain.client.client import Client  # the kubernetes client: imported only for cluster commands

    return Client(args.namespace, context=args.context, kubeconfig=args.kubeconfig,
                  request_timeout=args.request_timeout)


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _ref(name: str) -> str:
    from disttrain.client.client import OBJECT

    return f"{OBJECT}/{name}"


def _files(args: argparse.Namespace) -> list[str] | str:
    """FILE and -f FILE (kubectl's -f; `-` reads stdin), in the order given; or what is wrong."""
    files = ([args.file] if args.file else []) + (args.filename or [])
    if not files:
        return "give the file of jobs: FILE or -f FILE (- reads stdin)"
    if files.count("-") > 1:
        return "stdin (-) can be read once"
    return files


def _usage_error(message: str) -> int:
    """A command line that cannot be carried out as given: one line, exit 2 (argparse's code)."""
    print(f"error: {message}", file=sys.stderr)
    return 2


def _checked_documents(args: argparse.Namespace) -> list[Document] | int:
    """Every job of the files, validated offline; else the exit code, after printing why
    (2: no file given; 1: a file cannot be read or a job is invalid): nothing is sent."""
    files = _files(args)
    if isinstance(files, str):
        return _usage_error(files)
    documents: list[Document] = []
    for path in files:
        found = _read_jobs(path)
        if found is None:
            return 1
        documents.extend(found)
    ok = True
    for doc in documents:
        result = validate_document(doc.data)
        entry = report(doc, result)
        if not result.ok or entry["warnings"]:
            print_report(entry, sys.stderr)
        ok = ok and result.ok
    for doc in documents:  # every reason at once
        metadata = doc.data.get("metadata")
        ns = metadata.get("namespace") if isinstance(metadata, dict) else None
        if ns and args.namespace and ns != args.namespace:
            print(f"error: {doc.label}: the object's namespace {ns!r} does not match -n {args.namespace!r}; "
                  "drop one of them", file=sys.stderr)
            ok = False
    return documents if ok else 1  # nothing was sent: the operator would refuse it too


DRY_RUN = {"none": "", "client": " (dry run)", "server": " (server dry run)"}  # kubectl's suffixes


def cmd_submit(args: argparse.Namespace) -> int:
    documents = _checked_documents(args)
    if isinstance(documents, int):
        return documents
    if args.dry_run == "client":  # checked offline, as the operator would; nothing sent
        for doc in documents:
            print(f"{_ref(doc.data['metadata']['name'])} created (dry run)")  # a name is required: validated
        return 0
    client = _client(args)
    names = []
    for doc in documents:
        try:
            created = client.create(doc.data, dry_run=args.dry_run == "server")
        except _client_error() as exc:
            if "(AlreadyExists)" in str(exc):
                exc.args = (f"{exc}; `{program_name()} apply -f FILE` updates it",)
            raise
        names.append((created["metadata"]["name"], created["metadata"]["namespace"]))
        print(f"{_ref(names[-1][0])} created{DRY_RUN[args.dry_run]}")
    if args.detach or args.dry_run != "none" or len(names) != 1:
        return 0
    return _follow(client, *names[0])


def cmd_apply(args: argparse.Namespace) -> int:
    documents = _checked_documents(args)
    if isinstance(documents, int):
        return documents
    if args.dry_run == "client":
        for doc in documents:
            print(f"{_ref(doc.data['metadata']['name'])} configured (dry run)")  # apply needs a name: validated
        return 0
    client = _client(args)
    for doc in documents:
        obj, action = client.apply(doc.data, dry_run=args.dry_run == "server", force=args.force_conflicts)
        print(f"{_ref(obj['metadata']['name'])} {action}{DRY_RUN[args.dry_run]}")
    return 0


def _follow(client: Any, name: str, namespace: str) -> int:
    """Print a line on every change until the job ends: 0 Succeeded, 1 Failed."""
    from disttrain.client.jobview import progress_line

    print(f"following {name} (Ctrl-C stops following; the job keeps running)", file=sys.stderr)
    last = None
    for view in client.watch(name, namespace):
        if view != last:
            print(progress_line(view, _now()), flush=True)
            last = view
    for c in last.conditions if last else ():
        if c.get("type") == "Failed" and c.get("status") == "True":
            print(f"{name} failed: {c.get('reason')}: {c.get('message')}", file=sys.stderr)
    return 0 if last and last.phase == "Succeeded" else 1


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
            print(_ref(obj["metadata"]["name"]))
    elif kind == "jsonpath":
        for target in ([{"apiVersion": "v1", "kind": "List", "items": objs}] if listing and headers else objs):
            sys.stdout.write(render(template, target))
        sys.stdout.flush()
    elif kind == "custom-columns":
        lines = column_rows(parse_columns(template), objs, headers=headers and not args.no_headers)
        print("\n".join(lines))
    elif not listing:
        print("\n".join(status_lines(view_of(objs[0]), events or [], _now())))
    else:
        lines = top_table([view_of(o) for o in objs], _now(), args.all_namespaces,
                          headers=headers and not args.no_headers, wide=kind == "wide")
        print("\n".join(lines))
    sys.stdout.flush()


def cmd_get(args: argparse.Namespace) -> int:
    client = _client(args)
    if args.name is not None and args.all_namespaces:
        print("error: a NAME takes one namespace: drop -A and pass -n NAMESPACE", file=sys.stderr)
        return 2
    if args.watch:
        return _watch_get(client, args)
    if args.name is None:
        objs = client.list(all_namespaces=args.all_namespaces, selector=args.selector)
        if objs or args.output in ("json", "yaml"):
            print_objects(objs, args, listing=True)
        else:  # kubectl's words
            print(_none_found(client, args.all_namespaces), file=sys.stderr)
        return 0
    obj = client.get(args.name)
    events = client.events(args.name) if args.output == "text" else None
    print_objects([obj], args, listing=False, events=events)
    return 0


def _none_found(client: Any, all_namespaces: bool = False) -> str:
    """kubectl's words for an empty list."""
    return "No resources found" if all_namespaces else f"No resources found in {client.namespace} namespace."


def _watch_get(client: Any, args: argparse.Namespace) -> int:
    """`get -w`: what get prints now, then one line (or document) per change, until
    Ctrl-C. A NAME that does not exist is NotFound, as in kubectl."""
    if args.name is not None:
        client.get(args.name)
    # One job is a row too (get NAME's text is several lines: a row per change reads better).
    rows = argparse.Namespace(**{**vars(args), "output": "wide" if args.name and args.output == "text"
                                 else args.output})
    table = rows.output.partition("=")[0] in ("text", "wide", "custom-columns")
    first: list[dict[str, Any]] = []
    seen: dict[tuple[str, str], str] = {}
    synced = False
    for kind, obj in client.watch_all(all_namespaces=args.all_namespaces, selector=args.selector, name=args.name):
        if kind in ("RELIST", "SYNCED"):
            if kind == "SYNCED" and not synced:
                synced = True
                if first:
                    print_objects(first, rows, listing=True, headers=table)
                elif args.name is None:
                    print(_none_found(client, args.all_namespaces), file=sys.stderr)
            continue
        key = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        version = obj["metadata"].get("resourceVersion", "")
        if kind != "DELETED" and seen.get(key) == version:
            continue  # a relist after an expired watch: already shown
        seen[key] = version
        if not synced:
            first.append(obj)
        else:
            print_objects([obj], rows, listing=True, headers=False)
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    client = _client(args)
    for line in client.logs(args.name, worker=args.worker, follow=args.follow, tail=args.tail, since=args.since,
                            previous=args.previous):
        prefix = f"[worker-{line.worker}]" if line.worker is not None else "[worker-?]"
        stamp = f" {line.time}" if args.timestamps else ""
        print(f"{prefix}{stamp} {line.text}", flush=args.follow)
    return 0


def cmd_wait(args: argparse.Namespace) -> int:
    from disttrain.client.jobview import parse_duration

    try:
        timeout = parse_duration(args.timeout) if args.timeout else None
    except ValueError as exc:
        print(f"error: --timeout: {exc}", file=sys.stderr)
        return 2
    want = args.target
    view = _client(args).wait_for(args.name, want, timeout=timeout)
    if want.delete:
        print(f"{_ref(args.name)} deleted")
    elif want.phases:
        print(f"{_ref(args.name)} is {view.phase}")
    else:
        print(f"{_ref(args.name)} condition met")  # kubectl's words
    return 0


def _wait_target(text: str) -> Any:
    from disttrain.client.jobview import parse_wait_for

    try:
        return parse_wait_for(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def for_each_job(args: argparse.Namespace, act: Callable[[Any, str], Any], done: Callable[[str, Any], str]) -> int:
    """suspend, resume and delete: on each NAME, or every job (--all) or those -l
    selects; every job is tried, one line per failure, exit 1 if any failed.
    --ignore-not-found skips names that do not exist, like kubectl's."""
    from disttrain.client.client import NotFound

    if args.names and (args.all or args.selector):
        return _usage_error("give NAMEs or --all/-l, not both")
    if not (args.names or args.all or args.selector):
        return _usage_error(f"name a job, or pass --all or -l SELECTOR (see {program_name()} {args.command} -h)")
    client = _client(args)
    names = args.names or [o["metadata"]["name"] for o in client.list(selector=args.selector)]
    if not names:
        print(_none_found(client), file=sys.stderr)
    failed = False
    for name in dict.fromkeys(names):
        try:
            result = act(client, name)
        except NotFound as exc:
            if not args.ignore_not_found:
                print(exc, file=sys.stderr)
                failed = True
            continue
        except _client_error() as exc:
            print(exc, file=sys.stderr)
            failed = True
            continue
        print(done(name, result), flush=True)
    return 1 if failed else 0


def cmd_suspend(args: argparse.Namespace) -> int:
    from disttrain.client.jobview import suspend_words

    return for_each_job(args, lambda c, name: c.suspend(name),
                        lambda name, obj: f"{_ref(name)} suspended ({suspend_words(obj)})")


def cmd_resume(args: argparse.Namespace) -> int:
    return for_each_job(args, lambda c, name: c.resume(name), lambda name, _: f"{_ref(name)} resumed")


def cmd_delete(args: argparse.Namespace) -> int:
    from disttrain.client.client import OBJECT

    return for_each_job(args, lambda c, name: c.delete(name, wait=args.wait), lambda name, _: f'{OBJECT} "{name}" deleted')


def cmd_top(args: argparse.Namespace) -> int:
    """Redraw on every watch event: no polling, so the API server sees one watch."""
    from disttrain.client.jobview import top_table, view_of

    client = _client(args)
    tty = sys.stdout.isatty()
    views: dict[tuple[str, str], Any] = {}
    synced = False
    for kind, obj in client.watch_all(all_namespaces=args.all_namespaces):
        if kind == "RELIST":
            views.clear()
            synced = False
            continue
        if kind == "SYNCED":
            synced = True
        else:
            key = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
            if kind == "DELETED":
                views.pop(key, None)
            else:
                views[key] = view_of(obj)
        if not synced:
            continue
        lines = top_table(list(views.values()), _now(), args.all_namespaces) or ["(no jobs yet)"]
        stamp = _now().strftime("%H:%M:%S")
        if tty:
            sys.stdout.write("\x1b[H\x1b[2J")
        sys.stdout.write("\n".join(lines) + f"\n-- {stamp}, {len(views)} job(s); updates on every change, "
                         "Ctrl-C quits\n" + ("" if tty else "\n"))
        sys.stdout.flush()
    return 0


# ---- the table of commands ----------------------------------------------------------


TEMPLATE_HELP = ("resolve each job against the TrainingTemplate or ClusterTrainingTemplate in FILE first, as "
                 "the operator does for spec.templateRef: its defaults < the job < its enforced settings "
                 "(docs/platform.md)")


def _setup_validate(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text")
    p.add_argument("--template", metavar="FILE", help=TEMPLATE_HELP + "; says where each setting came from")


def _setup_render(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("-n", "--namespace", help="namespace to render into (default: the "
                   "object's own, else default)")
    p.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")
    p.add_argument("--operator-namespace", default=os.environ.get("DISTTRAIN_OPERATOR_NAMESPACE") or "disttrain-system",
                   help="where the operator runs: its NetworkPolicy admits the operator from there to read "
                        "/status (default: $DISTTRAIN_OPERATOR_NAMESPACE, else disttrain-system)")
    p.add_argument("--no-network-policy", action="store_true",
                   help="leave out the NetworkPolicy, as an operator with DISTTRAIN_NETWORK_POLICY=false does")
    p.add_argument("--template", metavar="FILE", help=TEMPLATE_HELP)


def _setup_crd(p: argparse.ArgumentParser) -> None:
    from disttrain.api.template_resolution import TEMPLATE_KINDS

    p.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")
    p.add_argument("--kind", choices=(t.KIND, *TEMPLATE_KINDS), default=t.KIND,
                   help=f"whose CustomResourceDefinition (default: {t.KIND})")


def _setup_docs(p: argparse.ArgumentParser) -> None:
    p.add_argument("topic", choices=("api", "cli"), help="api: the API reference (docs/api.md); cli: every "
                   "command's --help (docs/cli-reference.md)")


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


def _file_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", nargs="?", help="the file of jobs (YAML or JSON; - reads stdin)")
    p.add_argument("-f", "--filename", action="append", metavar="FILE",
                   help="a file of jobs, like kubectl -f (repeat for more; - reads stdin)")
    p.add_argument("--dry-run", choices=tuple(DRY_RUN), default="none",
                   help="client: validate offline and print what would be sent; server: the API server checks "
                        "it too and stores nothing")


def _setup_submit(p: argparse.ArgumentParser) -> None:
    _file_options(p)
    p.add_argument("-d", "--detach", action="store_true", help="return once created; do not follow")


def _setup_apply(p: argparse.ArgumentParser) -> None:
    _file_options(p)
    p.add_argument("--force-conflicts", action="store_true",
                   help="take over fields another manager (kubectl apply, a controller) set")


def _setup_get(p: argparse.ArgumentParser) -> None:
    _job_argument(p, nargs="?")
    p.add_argument("-A", "--all-namespaces", action="store_true", help="list jobs of every namespace")
    p.add_argument("-o", "--output", type=output_format, default="text", metavar="FORMAT",
                   help="wide: also workers, loss and ETA; name: kind/name, one a line; json; yaml; "
                        "jsonpath=TEMPLATE and custom-columns=HEADER:PATH,... as kubectl takes them"
                   ).completer = lambda **_: [*GET_FORMATS, "jsonpath=", "custom-columns="]  # type: ignore[attr-defined]
    p.add_argument("-l", "--selector", help="only jobs with these labels, like kubectl -l (e.g. disttrain.dev/sweep=lr)")
    p.add_argument("--no-headers", action="store_true", help="the list without its header line")
    p.add_argument("-w", "--watch", action="store_true",
                   help="after the list (or the job), print a line on every change until Ctrl-C")


def _setup_status(p: argparse.ArgumentParser) -> None:
    _job_argument(p)
    p.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text",
                   help="json, yaml: the object itself, as kubectl get -o prints it")
    p.set_defaults(all_namespaces=False, watch=False)  # what get reads of a named job


def _setup_logs(p: argparse.ArgumentParser) -> None:
    _job_argument(p)
    p.add_argument("-f", "--follow", action="store_true", help="stream new lines until every worker's log ends")
    p.add_argument("--worker", type=int, metavar="I", help="only worker I (pod NAME-worker-I)")
    p.add_argument("--tail", type=int, metavar="N", help="the last N lines of each worker")
    p.add_argument("--since", type=_duration, metavar="DURATION",
                   help="only lines newer than this (30s, 5m, 1h), like kubectl logs --since")
    p.add_argument("--timestamps", action="store_true", help="each line's time (RFC 3339, from the kubelet) "
                   "after the worker prefix")
    p.add_argument("-p", "--previous", action="store_true",
                   help="the log of each worker's previous container (before it restarted)")


def _setup_wait(p: argparse.ArgumentParser) -> None:
    from disttrain.client.jobview import WAIT_FORMS, WAITABLE

    _job_argument(p)
    p.add_argument("--for", dest="target", type=_wait_target, default="Succeeded", metavar="WHAT",
                   help=f"what to wait for: {'; '.join(WAIT_FORMS)} (default: Succeeded)"
                   ).completer = lambda **_: [*WAITABLE, "condition=", "delete", "jsonpath="]  # type: ignore[attr-defined]
    p.add_argument("--timeout", metavar="DURATION", help="give up after this long: 90s, 5m, 1h (default: never); "
                   "exit code 124")


def _setup_targets(p: argparse.ArgumentParser) -> None:
    p.add_argument("names", nargs="*", metavar="NAME", help="the DistributedTrainings' names"
                   ).completer = _job_names  # type: ignore[attr-defined]
    p.add_argument("--all", action="store_true", help="every job in the namespace")
    p.add_argument("-l", "--selector", help="the jobs with these labels, like kubectl -l")
    p.add_argument("--ignore-not-found", action="store_true", help="a NAME that does not exist is not an error")


def _setup_delete(p: argparse.ArgumentParser) -> None:
    _setup_targets(p)
    p.add_argument("--wait", action="store_true", help="return once the job and its pods are gone")


def _setup_top(p: argparse.ArgumentParser) -> None:
    p.add_argument("-A", "--all-namespaces", action="store_true", help="jobs of every namespace")


for _command in (
    Command("validate", "check files offline with the operator's rules", "validate job.yaml",
            _setup_validate, cmd_validate),
    Command("render", "print the Service, NetworkPolicy and Pods the operator would create", "render job.yaml",
            _setup_render, cmd_render),
    Command("crd", "print the CustomResourceDefinition", "crd | kubectl apply -f -", _setup_crd, cmd_crd),
    Command("docs", "print generated documentation (api: the API reference; cli: every command's --help)", "docs api", _setup_docs, cmd_docs),
    Command("run", "run a job on this machine (--local), no cluster needed", "run --local job.yaml",
            _setup_run, cmd_run, needs=("torch", "numpy", "prometheus_client")),
    Command("submit", "validate offline, create the job, then follow it until it ends",
            "submit job.yaml", _setup_submit, cmd_submit, cluster=True),
    Command("apply", "validate offline, then create the job or update it (server-side apply)",
            "apply -f job.yaml", _setup_apply, cmd_apply, cluster=True),
    Command("get", "list jobs, or show one (phase, progress, conditions, events)", "get -A",
            _setup_get, cmd_get, cluster=True),
    Command("status", "one job: phase, progress bar, loss, samples/s, ETA, checkpoint age, conditions, "
            "recent events", "status my-job", _setup_status, cmd_get, cluster=True),
    Command("logs", "the trainer logs of every worker, interleaved, each line prefixed [worker-i]",
            "logs my-job -f", _setup_logs, cmd_logs, cluster=True),
    Command("wait", "block until the job is Running, Succeeded or Suspended, has a condition, is deleted, "
            "or a JSONPath has a value",
            "wait my-job --for Succeeded --timeout 1h", _setup_wait, cmd_wait, cluster=True),
    Command("suspend", "suspend the job: delete its pods, keep the job and its checkpoints",
            "suspend my-job", _setup_targets, cmd_suspend, cluster=True),
    Command("resume", "resume a suspended job from its newest checkpoint", "resume my-job",
            _setup_targets, cmd_resume, cluster=True),
    Command("delete", "delete the job and its pods", "delete my-job", _setup_delete, cmd_delete, cluster=True),
    Command("top", "every job of a namespace (or all), one live line each, redrawn on every change",
            "top -A", _setup_top, cmd_top, cluster=True),
    Command("version", "print disttrain's version and the API version it speaks", "version", _setup_version,
            cmd_version),
    Command("completion", "print the shell completion script (bash, zsh or fish)",
            'completion bash > ~/.local/share/bash-completion/completions/disttrain', _setup_completion, cmd_completion),
    Command("sweep", sweep_command.HELP, "sweep sweep.yaml", sweep_command.setup_parser, sweep_command.cmd_sweep,
            needs=("optuna",)),
):
    register(_command)


if __name__ == "__main__":
    sys.exit(main())

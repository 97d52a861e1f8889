"""How much of a planted-bug set a layer of the suite catches, measured from outside.

For each bug of a set (a JSON file: {"bugs": [{"name", "layer", "file", "old", "new",
"why"}]}, hack/planted/second-set.json), a temporary copy of the checkout, or of a commit
with --rev (the suite as it stood then), gets the bug, and `pytest -x` runs the given test
paths on it. CAUGHT names the first test that failed or errored; MISSED means every test passed; STALE
means the bug's `old` text is not in that tree exactly once. The same paths first run once
on the unchanged copy and must pass, or a failure would mean nothing. Run the costly layers
only on what the cheaper ones missed: --only takes the names a previous run printed.

A bug that is caught costs only the tests before its first failure, so each bug's run puts
first the test files that name the file it changed (its module, or a chart or manifest
file's name); the order only changes how soon a failure shows, never what runs (a PATH
that is a node id is run as given). --jobs runs
that many bugs at once (each in its own copy).

    python hack/planted_sweep.py [--rev REV] [--set FILE] [--only A,B] [--jobs N] [--json OUT] PATH...
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from planted_bugs import ROOT, copy_checkout, env_for  # noqa: E402  (a sibling script)

DEFAULT_SET = ROOT / "hack" / "planted" / "second-set.json"


def checkout(dest: Path, rev: str | None) -> None:
    """The tree to plant into, as a git work tree of its own: some tests list the
    checkout's files with git (`make planted-bugs` copies what git tracks)."""
    if rev is None:
        copy_checkout(dest)
    else:
        dest.mkdir(parents=True)
        archive = subprocess.run(["git", "archive", rev], cwd=ROOT, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    for command in (["git", "init", "-q"], ["git", "add", "-A"]):
        subprocess.run(command, cwd=dest, check=True, capture_output=True)


def names_for(changed: str) -> tuple[str, ...]:
    """How a test file would name the changed file: a module's dotted names, else its name."""
    path = Path(changed)
    if path.suffix != ".py" or len(path.parts) < 2:
        return (path.name,)
    parts = path.with_suffix("").parts[1:]  # operator/ or trainer/ is a PYTHONPATH root
    if parts[-1] == "__init__":
        parts = parts[:-1]
    dotted = ".".join(parts)
    package, _, module = dotted.rpartition(".")
    return (dotted, f"from {package} import {module}") if package else (dotted,)


def related_first(copy: Path, paths: list[str], changed: str) -> list[str]:
    """The layer's test files, those that name the changed file first. A directory is
    spelled out file by file: pytest keeps the order of files given one by one, but not of
    a file given again inside a directory."""
    names = names_for(changed)
    files = []
    for path in paths:
        root = copy / path
        found = sorted(root.rglob("test_*.py")) if root.is_dir() else [root]
        files += [str(test.relative_to(copy)) for test in found if str(test.relative_to(copy)) not in files]
    related = [f for f in files if (copy / f).is_file()
               and any(name in (copy / f).read_text(errors="replace") for name in names)]
    return [*related, *(f for f in files if f not in related)]


RUNNING: set[subprocess.Popen[str]] = set()  # the pytest runs now going, stopped with the sweep


def run_tests(copy: Path, paths: list[str]) -> tuple[int, str | None, str]:
    """(pytest's exit status, the first failed test or None, the output's end)."""
    with subprocess.Popen([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-rfE", *paths],
                          cwd=copy, env=env_for(copy), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as run:
        RUNNING.add(run)
        try:
            stdout, stderr = run.communicate()
        finally:
            RUNNING.discard(run)
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", stdout, flags=re.M)
    return run.returncode, (failed[0] if failed else None), (stdout + stderr)[-3000:]


def stop(*_: object) -> None:
    """SIGTERM: no new bug starts, the running pytest sessions end, the temporary tree goes."""
    for run in list(RUNNING):
        os.killpg(run.pid, signal.SIGKILL)
    sys.exit(143)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", help="test paths to run on each planted copy (a layer)")
    parser.add_argument("--rev", help="plant into this commit's tree instead of the checkout")
    parser.add_argument("--set", default=str(DEFAULT_SET), help="the bug set (JSON)")
    parser.add_argument("--only", default="", help="comma-separated bug names (default: all)")
    parser.add_argument("--jobs", type=int, default=1, help="bugs run at once (default 1)")
    parser.add_argument("--json", help="write {name: verdict, first failed test} here")
    args = parser.parse_args(argv)
    bugs = json.loads(Path(args.set).read_text())["bugs"]
    if args.only:
        wanted = set(args.only.split(","))
        unknown = wanted - {b["name"] for b in bugs}
        if unknown:
            parser.error(f"unknown bug(s): {', '.join(sorted(unknown))}")
        bugs = [b for b in bugs if b["name"] in wanted]
    signal.signal(signal.SIGTERM, stop)
    results: dict[str, dict[str, str | None]] = {}
    with tempfile.TemporaryDirectory(prefix="planted-sweep-") as tmp:
        base = Path(tmp) / "base"
        checkout(base, args.rev)
        started = time.monotonic()
        status, first, output = run_tests(base, args.paths)
        print(f"baseline {args.rev or 'checkout'}: {' '.join(args.paths)}: "
              f"{'pass' if status == 0 else 'FAIL'} ({time.monotonic() - started:.0f}s)", flush=True)
        if status != 0:
            print(output)
            return 1
        width = max(len(b["name"]) for b in bugs)

        def sweep(i: int, bug: dict[str, str]) -> None:
            started = time.monotonic()
            source = (base / bug["file"]).read_text()
            if source.count(bug["old"]) != 1:
                verdict, first = "STALE", None
            else:
                work = Path(tmp) / f"bug-{i}"
                subprocess.run(["cp", "-a", str(base), str(work)], check=True)
                (work / bug["file"]).write_text(source.replace(bug["old"], bug["new"]))
                status, first, _ = run_tests(work, related_first(work, args.paths, bug["file"]))
                subprocess.run(["rm", "-rf", str(work)], check=True)
                verdict = "MISSED" if status == 0 else "CAUGHT" if first else "ERROR"
            results[bug["name"]] = {"verdict": verdict, "first": first, "layer": bug["layer"]}
            print(f"{bug['name']:<{width}}  {verdict:<6} {time.monotonic() - started:5.0f}s  {first or ''}", flush=True)

        pool = concurrent.futures.ThreadPoolExecutor(max(1, args.jobs))
        try:
            for done in [pool.submit(sweep, i, bug) for i, bug in enumerate(bugs)]:
                done.result()
        finally:
            pool.shutdown(cancel_futures=True)
        results = {b["name"]: results[b["name"]] for b in bugs}  # the set's order, whatever finished first
    caught = [n for n, r in results.items() if r["verdict"] == "CAUGHT"]
    missed = [n for n, r in results.items() if r["verdict"] == "MISSED"]
    print(f"{len(caught)} of {len(results)} caught by {' '.join(args.paths)}")
    if missed:
        print("missed: " + ",".join(missed))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        sys.exit("interrupted")

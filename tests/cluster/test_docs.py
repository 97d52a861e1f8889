"""Every console block of README.md and docs/*.md runs as written, or says why not.

Each doc's blocks run in order in one bash session (exports carry over, as in a reader's
terminal) on `make cluster-up`'s cluster, the one the docs describe: the harness gives the
session a scratch HOME (so `make cluster-up` and `$HOME/.cache/disttrain/clusters/default`
are this test's own, never a reader's), the shared tool and venv caches, a scratch copy of
the checkout (links to every top-level entry, so files the docs write land there) and
`disttrain`/`disttrain-operator` on PATH from this checkout. The cluster is brought up
before each doc (`hack/cluster.sh up` is idempotent) and taken down at the end.
`DISTTRAIN_OPERATOR_METRICS_PORT=0`: an operator a doc starts must not collide with
another run's on this shared machine. The markers are in tests/doc_blocks.py and
docs/contributing.md.

Run one doc's blocks: `pytest tests/cluster/test_docs.py -k guide.md`.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("doc_blocks", ROOT / "tests" / "doc_blocks.py")
doc_blocks = sys.modules.setdefault("doc_blocks", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(doc_blocks)  # (registered first: its dataclasses look themselves up there)
import progress_wait  # noqa: E402  (tests/progress_wait.py; tests/ is on sys.path, as for tests/conftest.py)

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DOC_STALL = 240  # seconds a doc's commands may go without printing


def blocks_of(path: Path) -> list:
    return doc_blocks.parse_blocks(str(path.relative_to(ROOT)), path.read_text())


@pytest.fixture(scope="module")
def doc_shell(tmp_path_factory):
    """The environment every doc's commands run in; its cluster is removed at the end."""
    scratch = tmp_path_factory.mktemp("docs")
    home, wrappers = scratch / "home", scratch / "bin"
    home.mkdir()
    wrappers.mkdir()
    pythonpath = f"{ROOT / 'operator'}{os.pathsep}{ROOT / 'trainer'}"
    for name, module in (("disttrain", "disttrain.cli"), ("disttrain-operator", "disttrain.operator")):
        script = wrappers / name
        script.write_text(f"#!/bin/sh\nPYTHONPATH={shlex.quote(pythonpath)} exec {shlex.quote(sys.executable)} "
                          f"-m {module} \"$@\"\n")
        script.chmod(0o755)
    tools = subprocess.run(["bash", str(ROOT / "hack" / "build-tools.sh"), "--print-bin"], capture_output=True,
                           text=True, check=True).stdout.strip()
    cluster_dir = home / ".cache" / "disttrain" / "clusters" / "default"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DISTTRAIN_", "KUBECONFIG", "PYTHONPATH", "PET_"))}
    env.update(
        HOME=str(home),
        DISTTRAIN_CACHE=os.environ.get("DISTTRAIN_CACHE", str(Path.home() / ".cache" / "disttrain")),
        DISTTRAIN_CLUSTER_DIR=str(cluster_dir),
        DISTTRAIN_CLUSTER_OWNER_PID=str(os.getpid()),  # its reaper stops the cluster if pytest dies
        DISTTRAIN_OPERATOR_METRICS_PORT="0",
        KUBECONFIG=str(cluster_dir / "kubeconfig"),
        PATH=os.pathsep.join([str(wrappers), tools, os.environ.get("PATH", "/usr/bin:/bin")]),
    )
    env.pop("XDG_CACHE_HOME", None)
    yield scratch, env
    subprocess.run(["bash", str(ROOT / "hack" / "cluster.sh"), "down"], env=env, capture_output=True, timeout=300)
    for made in Path(env["DISTTRAIN_CACHE"]).glob("checkout-*/.checkout"):  # the venvs a doc's hack/venv.sh made
        if made.read_text().strip().startswith(str(scratch)):
            shutil.rmtree(made.parent, ignore_errors=True)


def checkout_copy(scratch: Path, doc: str) -> Path:
    """A directory that looks like the checkout (links), where this doc's files go."""
    work = scratch / ("work-" + doc.replace("/", "-"))
    work.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in (".git", ".disttrain"):
            (work / entry.name).symlink_to(entry)
    return work


def script_for(blocks: list, out: Path) -> tuple[str, list, list[str]]:
    """bash for the runnable commands; [(block, command)] in order; 'where: reason' not run."""
    lines, order, not_run = ["set -e"], [], []
    for block in blocks:
        if block.lang != "console":
            continue
        if block.not_run:
            not_run.append(f"{block.where}: {block.not_run}")
            continue
        for command in doc_blocks.commands(block):
            if reason := doc_blocks.skip_reason(block, command):
                not_run.append(f"{block.where}: `{command.text.split(chr(10))[0]}`: {reason}")
                continue
            index = len(order)
            order.append((block, command))
            line = doc_blocks.shell_line(command)
            if block.check_output:  # (no exports in such blocks: the pipe runs in a subshell)
                line = f"{{ {line}\n}} 2>&1 | tee {out}/{index}.out; test ${{PIPESTATUS[0]}} -eq 0"
            lines += [line, f"echo {index} > {out}/last-ok"]
    return "\n".join(lines) + "\n", order, not_run


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_console_blocks_run_as_written(doc, doc_shell, capsys):
    scratch, env = doc_shell
    name = str(doc.relative_to(ROOT))
    blocks = blocks_of(doc)
    work = checkout_copy(scratch, name)
    for block in blocks:
        if block.file:
            (work / block.file).write_text(block.text)
    out = scratch / ("out-" + name.replace("/", "-"))
    out.mkdir()
    script, order, not_run = script_for(blocks, out)
    with capsys.disabled():
        print(f"\n{name}: {len(order)} commands run; not run:" + "".join(f"\n  {n}" for n in not_run or ["(none)"]))
    if not order:
        return
    up = subprocess.run(["bash", str(ROOT / "hack" / "cluster.sh"), "up"], env=env, capture_output=True, text=True,
                        timeout=600)
    assert up.returncode == 0, up.stderr[-3000:]
    log_path = out / "log"
    with log_path.open("w") as sink:
        proc = subprocess.Popen(["bash", "-c", script], cwd=work, env=env, stdout=sink, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
    try:  # a doc fails when its commands stop printing and finishing, not after a total time
        last_ok = out / "last-ok"  # the index of the last command that ended well
        progress_wait.wait_moving(
            lambda: (proc.poll(), log_path.stat().st_size, last_ok.read_text() if last_ok.exists() else ""),
            lambda seen: seen[0] is not None, progress=lambda seen: seen[1:], stall=DOC_STALL,
            what=f"{name}'s commands (output bytes, last command done)",
            describe=lambda: log_path.read_text(errors="replace")[-4000:])
    finally:
        try:  # whatever a doc left in the background (an operator it started), or the commands themselves
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    log = log_path.read_text(errors="replace")
    if proc.returncode != 0:
        last = int((out / "last-ok").read_text()) if (out / "last-ok").exists() else -1
        block, command = order[last + 1] if last + 1 < len(order) else order[-1]
        pytest.fail(f"{block.where}: `{command.text}` exited {proc.returncode}:\n{log[-4000:]}", pytrace=False)
    wrong = []  # every sample of the doc that is not what its command printed, not just the first
    for index, (block, command) in enumerate(order):
        if block.check_output:
            actual = (out / f"{index}.out").read_text()
            if missing := doc_blocks.output_matches(command.output, actual):
                wrong.append(f"{block.where}: `{command.text}` did not print {missing!r}; it printed:\n{actual}")
    assert not wrong, "\n\n".join(wrong)

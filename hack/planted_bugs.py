"""`make planted-bugs`: each planted bug must be caught by the tests named for it.

Two sets. BUGS below: the bugs the issue-14 audit found that the unit tests did not notice,
fixed since. hack/planted/*.json: bugs written from docs/ and the code by someone who had
not read the tests (issue 29), first measured layer by layer with hack/planted_sweep.py;
each entry's "tests" names the tests, of any layer, that state the behaviour it breaks.
Each is an exact source replacement with the tests that must catch it.
For every entry the checkout (its tracked and untracked, not ignored, files) is copied into
a temporary directory, the bug is planted there, and the named tests run with pytest on that
copy (PYTHONPATH = the copy's operator/ and trainer/); the real checkout is never touched.
First the same tests run once on the unchanged copy and must pass, or the check means
nothing. One line per bug says CAUGHT (every named test failed), MISSED (one passed),
STALE (the original source is no longer found exactly once: the code moved, update the
plant) or ERROR (pytest could not run them, or the regeneration failed).

Usage: python hack/planted_bugs.py [--under PATH] [NAME ...]   (the venv's python; `make planted-bugs`)
--under tests/unit keeps the bugs whose named tests all lie there (the suite runs those; the
trainer and cluster ones cost minutes each). The cluster tests need `make tools` on PATH.
Exit status 0 only if every selected bug is CAUGHT.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORE = "operator/disttrain/operator/core"
PODS = "operator/disttrain/operator/core/pods.py"
VALIDATE = "operator/disttrain/api/validate.py"
SCHEMA = "operator/disttrain/api/schema.py"
DEFAULTS = "operator/disttrain/api/defaults.py"
TRAINER_METRICS = "trainer/disttrain_trainer/metrics.py"
FAILURES = "tests/unit/test_plan_failures.py"
CEL_TABLE = "tests/unit/test_cel_rules.py::test_cel_rules_and_the_validator_agree"

# `make crd`, as it runs in the copy: a changed CEL rule reaches the committed CRD, so only
# a test of the rule's meaning can catch it (not test_crd.py's drift check).
REGENERATE_CRD = [
    ("python -m disttrain.cli crd --kind DistributedTraining", "manifests/crd/disttrain.dev_distributedtrainings.yaml"),
    ("python -m disttrain.cli docs api", "docs/api.md"),
    ("cp manifests/crd/disttrain.dev_distributedtrainings.yaml charts/disttrain/crds/", None),
    ("python hack/chart_rbac_rules.py --write", None),
]


@dataclass(frozen=True)
class Bug:
    name: str
    why: str  # what goes wrong for a user
    file: str
    old: str  # must occur exactly once in file
    new: str
    tests: tuple[str, ...]  # pytest node ids; each must fail
    regenerate: bool = False  # run REGENERATE_CRD after planting


BUGS = [
    Bug("restart-due-off-by-one", "a crashed worker is recreated one reconcile after its back-off ends",
        f"{CORE}/recovery.py", "elif plan.now >= due:", "elif plan.now > due:",
        (f"{FAILURES}::test_failed_worker_is_recreated_exactly_at_its_due_time",)),
    Bug("success-beside-a-crash", "a job is Succeeded although a worker crashed after another exited 0",
        f"{CORE}/ends.py", "return bool(finished) and (not crashed or any(p.report is not None for p in finished))",
        "return bool(finished)",
        (f"{FAILURES}::test_a_worker_that_failed_after_another_exited_0_is_not_a_success",)),
    Bug("disruption-condition-ignored", "a pod with DisruptionTarget=True spends backoffLimit as a crash",
        PODS, 'reason in DISRUPTION_REASONS or disruption.get("status") == "True"',
        "reason in DISRUPTION_REASONS",
        (f"{FAILURES}::test_disrupted_worker_is_recreated_at_once_without_spending_backoff",)),
    Bug("disruption-reasons-only-evicted", "preempted or shut-down pods spend backoffLimit as crashes",
        PODS, 'frozenset({"Evicted", "Preempting", "Shutdown", "Terminated", "NodeLost",\n'
              '                                "NodeAffinity", "OutOfcpu", "OutOfmemory", "UnexpectedAdmissionError"})',
        'frozenset({"Evicted"})',
        (f"{FAILURES}::test_disrupted_worker_is_recreated_at_once_without_spending_backoff",)),
    Bug("offline-min-nodes-too-strict", "disttrain validate rejects minNodes == nodes, which the CRD accepts",
        VALIDATE, "low is not None and low > nodes", "low is not None and low >= nodes", (CEL_TABLE,)),
    Bug("offline-min-nodes-too-lax", "disttrain validate accepts minNodes = nodes + 1, which the CRD rejects",
        VALIDATE, "low is not None and low > nodes", "low is not None and low > nodes + 1", (CEL_TABLE,)),
    Bug("offline-max-nodes-too-strict", "disttrain validate rejects nodes == maxNodes, which the CRD accepts",
        VALIDATE, "high is not None and nodes > high", "high is not None and nodes >= high", (CEL_TABLE,)),
    Bug("offline-max-nodes-too-lax", "disttrain validate accepts nodes = maxNodes + 1, which the CRD rejects",
        VALIDATE, "high is not None and nodes > high", "high is not None and nodes > high + 1", (CEL_TABLE,)),
    Bug("cel-max-nodes-too-strict", "kubectl apply rejects nodes == maxNodes (CRD regenerated)",
        SCHEMA, 'self.nodes <= self.maxNodes",', 'self.nodes < self.maxNodes",', (CEL_TABLE,), regenerate=True),
    Bug("cel-min-nodes-too-lax", "kubectl apply accepts minNodes = nodes + 1 (CRD regenerated)",
        SCHEMA, 'self.minNodes <= self.nodes",', 'self.minNodes <= self.nodes + 1",', (CEL_TABLE,),
        regenerate=True),
    Bug("fsdp-one-device-no-fallback", "FSDP on a single device is kept instead of falling back to auto",
        DEFAULTS, 'if max_devices == 1 and strategy in ("ddp", "fsdp"):',
        'if max_devices == 1 and strategy == "ddp":',
        ("tests/unit/test_guardrails.py::test_fsdp_on_one_device_warns_and_falls_back_to_auto",)),
    Bug("rdzv-store-env-not-reserved", "a user's env may override TORCH_DISABLE_SHARE_RDZV_TCP_STORE",
        VALIDATE, '    "TORCH_DISABLE_SHARE_RDZV_TCP_STORE",\n', "",
        ("tests/unit/test_reserved_env.py::test_every_name_render_emits_is_reserved",)),
    Bug("trainer-metric-renamed", "the dashboards and alerts query a metric the trainer no longer exports",
        TRAINER_METRICS, 'gauge("disttrain_train_step",', 'gauge("disttrain_train_steps",',
        ("tests/unit/test_chart_sources.py::test_the_code_exports_every_design_metric_name",
         "tests/unit/test_chart_sources.py::test_dashboards_query_only_metrics_we_export",
         "tests/unit/test_chart_sources.py::test_alert_rules_use_only_metrics_we_export")),
]


def planted_sets() -> list[Bug]:
    """The bugs of hack/planted/*.json, each with the tests that catch it."""
    bugs = []
    for path in sorted((ROOT / "hack" / "planted").glob("*.json")):
        for entry in json.loads(path.read_text())["bugs"]:
            if not entry.get("tests"):
                raise SystemExit(f"{path.relative_to(ROOT)}: {entry['name']} names no test that catches it")
            bugs.append(Bug(entry["name"], entry["why"], entry["file"], entry["old"], entry["new"],
                            tuple(entry["tests"])))
    return bugs


ALL_BUGS = BUGS + planted_sets()


def copy_checkout(dest: Path) -> None:
    """The checkout's tracked and untracked (not ignored) files, as they are on disk."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for name in sorted(set(filter(None, listed.split("\0")))):
        src = ROOT / name
        if src.is_file():  # a tracked file deleted on disk is left out, as it is on disk
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def env_for(copy: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=f"{copy}/operator:{copy}/trainer",
                PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")


def regenerate(copy: Path) -> str | None:
    """Run REGENERATE_CRD in the copy; the error, or None."""
    for command, output in REGENERATE_CRD:
        run = subprocess.run(command, shell=True, cwd=copy, env=env_for(copy), capture_output=True, text=True)
        if run.returncode != 0:
            return f"`{command}` failed: {run.stderr.strip()[-500:]}"
        if output:
            (copy / output).write_text(run.stdout)
    return None


def pytest(copy: Path, tests: tuple[str, ...]) -> tuple[int, set[str], str]:
    """(exit status, the named tests with a failure, output) of the tests run in the copy."""
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rf", *tests],
                         cwd=copy, env=env_for(copy), capture_output=True, text=True)
    failed = re.findall(r"^FAILED (\S+)", run.stdout, flags=re.M)  # "FAILED id[param] - message"
    named = {t for t in tests if any(f == t or f.startswith(t + "[") for f in failed)}
    return run.returncode, named, run.stdout + run.stderr


def check(bug: Bug, base: Path, work: Path) -> tuple[str, str]:
    """(verdict, detail) of one planted bug, in a fresh copy of base at work."""
    source = (base / bug.file).read_text()
    if source.count(bug.old) != 1:
        return "STALE", f"found {source.count(bug.old)} times in {bug.file}, not once"
    shutil.copytree(base, work, symlinks=True)
    (work / bug.file).write_text(source.replace(bug.old, bug.new))
    if bug.regenerate and (error := regenerate(work)):
        return "ERROR", error
    status, failed, output = pytest(work, bug.tests)
    if status not in (0, 1):  # 2: interrupted or collection error, 4: unknown node id, 5: none collected
        return "ERROR", f"pytest exited {status}:\n{output[-2000:]}"
    missed = [t for t in bug.tests if t not in failed]
    return ("MISSED", "still passing: " + ", ".join(missed)) if missed else ("CAUGHT", "")


def main(argv: list[str]) -> int:
    under = None
    if argv[:1] == ["--under"] and len(argv) > 1:
        under, argv = argv[1].rstrip("/") + "/", argv[2:]
    names = [b.name for b in ALL_BUGS]
    if len(set(names)) != len(names):
        print(f"a bug name is used twice: {sorted({n for n in names if names.count(n) > 1})}")
        return 2
    unknown = set(argv) - set(names)
    if unknown:
        print(f"unknown bug(s): {', '.join(sorted(unknown))}; known: {', '.join(names)}")
        return 2
    bugs = [b for b in ALL_BUGS if (not argv or b.name in argv)
            and (under is None or all(t.startswith(under) for t in b.tests))]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # clean the temp dir up on kill too
    with tempfile.TemporaryDirectory(prefix="planted-bugs-") as tmp:
        base = Path(tmp) / "checkout"
        copy_checkout(base)
        tests = tuple(dict.fromkeys(t for b in bugs for t in b.tests))
        started = time.monotonic()
        status, failed, output = pytest(base, tests)
        print(f"baseline: {len(tests)} test(s) on the unchanged checkout: "
              f"{'pass' if status == 0 else 'FAIL'} ({time.monotonic() - started:.0f}s)")
        if status != 0:
            print(output[-4000:])
            print("the named tests must pass before a planted bug can be said to make them fail")
            return 1
        width = max(len(b.name) for b in bugs)
        verdicts = []
        for i, bug in enumerate(bugs):
            started = time.monotonic()
            verdict, detail = check(bug, base, Path(tmp) / f"bug-{i}")
            shutil.rmtree(Path(tmp) / f"bug-{i}", ignore_errors=True)
            verdicts.append(verdict)
            named = ", ".join(t.removeprefix("tests/unit/") for t in bug.tests)
            print(f"{bug.name:<{width}}  {verdict:<6} {time.monotonic() - started:5.1f}s  {bug.file}  {named}",
                  flush=True)
            if detail:
                print("\n".join(f"{'':<{width}}  {line}" for line in detail.splitlines()))
    caught = verdicts.count("CAUGHT")
    print(f"{caught} of {len(bugs)} planted bugs caught")
    return 0 if caught == len(bugs) else 1


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:  # the temporary directory is gone already
        sys.exit("interrupted")

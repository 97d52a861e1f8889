"""`make mutation`: mutation testing of the pure core with mutmut, incremental.

mutmut names mutants by module and expects the packages at the top of the project, so
the checkout is mirrored into a work tree under the cache
(${DISTTRAIN_CACHE:-~/.cache/disttrain}/mutation/<checkout>/), with
operator/disttrain and trainer/disttrain_trainer at its top. Files are copied
only when their content changed, and mutmut keeps its verdicts there between runs: a run
re-tests only the functions whose source changed (mutmut hashes each function) and, when
the tests changed, the mutants that survived or had no test, with every function's tests
found again (mutmut would look again only at the test files that changed). Then it prints, per module,
mutants, killed, survived, equivalent (listed with a reason in hack/mutation-equivalent.txt)
and the score, followed by every surviving mutant as a diff.

Usage: python hack/mutation.py [--jobs N] [--report-only] [--pin-equivalents] [--cluster] [--skip REGEX] [PATH ...]
PATHs are source files or folders of the checkout (default: MODULES, or CLUSTER_MODULES
with --cluster).

--cluster: the Python client and the CLI, whose cluster commands only a real API server
exercises. A control plane is started for the run (hack/cluster.sh, torn down after, and by
its reaper if this process is killed), and every mutant of CLUSTER_MODULES also meets the
tests that run against it with no operator (CLUSTER_TESTS: the client's, and the CLI
commands' that take no `operator` fixture). Its verdicts live in a work tree of
their own (<checkout>-cluster), so the two modes never drop each other's.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import difflib
import filecmp
import functools
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# (folder of the checkout, package in it): every package the tests import.
SOURCE_PACKAGES = [("operator", "disttrain"), ("trainer", "disttrain_trainer")]
SOURCE_ROOTS = {root for root, _ in SOURCE_PACKAGES}
CACHE = Path(os.environ.get("DISTTRAIN_CACHE", Path.home() / ".cache" / "disttrain"))
EQUIVALENT_FILE = ROOT / "hack" / "mutation-equivalent.txt"

# The pure core: parse/default/validate/render, the decisions and the status they write.
MODULES = [
    "operator/disttrain/api",
    "operator/disttrain/render",
    "operator/disttrain/api/conditions.py",
    "operator/disttrain/operator/core/plan.py",
    "operator/disttrain/operator/core/state.py",
    "operator/disttrain/integrations/kueue/admission.py",
    "operator/disttrain/operator/core/stopping.py",
    "operator/disttrain/operator/core/recovery.py",
    "operator/disttrain/operator/core/ends.py",
    "operator/disttrain/operator/core/writes.py",
    "operator/disttrain/operator/core/pods.py",
    "operator/disttrain/operator/core/status.py",
    "trainer/disttrain_trainer/config.py",
    "trainer/disttrain_trainer/checkpoint.py",
    # What users call and read: the trainer's metrics (issue 29); the CLI and the Python
    # client are CLUSTER_MODULES (their unit tests meet their mutants there too).
    "trainer/disttrain_trainer/metrics.py",
    "trainer/disttrain_trainer/status_server.py",
]
# The tests that may kill a mutant: the in-process ones (a new test file joins by itself;
# changing this list makes mutmut forget every verdict).
# They read the checkout's pyproject.toml, which the work tree replaces with mutmut's
# (packaging and versions, no mutant of the core).
READ_PYPROJECT = [
    "--deselect", "tests/unit/test_operator_main.py::test_the_operator_image_does_not_install_the_official_client",
    "--deselect", "tests/unit/test_cli.py::test_version_is_the_package_the_chart_and_the_api"]
TESTS = ["tests/unit", "tests/trainer", "-m", "not dist and not slow and not cluster", *READ_PYPROJECT]
# --cluster: the client and the CLI, and the tests that reach them through the real API
# server with no operator: the client's, and the CLI commands' that take no `operator`
# fixture (they run each command that returns through main() in the test's process).
CLUSTER_MODULES = ["operator/disttrain/client/client.py", "operator/disttrain/client/errors.py",
                   "operator/disttrain/client/kubeconfig.py", "operator/disttrain/client/logs.py",
                   # the CLI: main's table and the modules it is made of
                   *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "operator" / "disttrain" / "cli").glob("*.py")
                           if p.name not in ("__init__.py", "__main__.py", "template_files.py"))]
CLIENT_CLUSTER_TESTS = ROOT / "tests" / "cluster" / "test_client_api.py"
CLI_CLUSTER_TESTS = ROOT / "tests" / "cluster" / "test_cli_commands.py"


def operator_less(path: Path) -> list[str]:
    """The node ids of the tests in `path` that take no `operator` fixture."""
    tree = ast.parse(path.read_text())
    return [f"{path.relative_to(ROOT)}::{node.name}" for node in tree.body
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
            and "operator" not in [a.arg for a in node.args.args]]


CLUSTER_TESTS = ["tests/unit", str(CLIENT_CLUSTER_TESTS.relative_to(ROOT)), *operator_less(CLI_CLUSTER_TESTS),
                 "-m", "not dist and not slow", *READ_PYPROJECT]
# Lines that are not behaviour: log calls.
NOT_MUTATED = [r"^\s*log\.(debug|info|warning|error|exception)\("]
# Copied beside the packages because the tests read them (Dockerfile, charts, docs, hack/...):
# every tracked top-level entry but the source roots and the CI/git plumbing. Asked of git
# when a run needs it, so the module imports where there is no checkout (its own unit tests
# run in the mutation work tree too).
@functools.cache
def data_entries() -> list[str]:
    return sorted({line.split("/", 1)[0] for line in subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.splitlines()}
        - {"operator", "trainer", ".ci", ".gitignore", ".dockerignore", "bench", "pyproject.toml"})  # ours is written below


STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests", 34: "skipped",
          35: "suspicious", 36: "timeout", 24: "timeout", -24: "timeout", 152: "timeout", 255: "timeout",
          37: "killed", None: "not checked", -9: "killed", -11: "killed"}


def work_dir(cluster: bool = False) -> Path:
    key = hashlib.sha256(str(ROOT).encode()).hexdigest()[:8]
    return CACHE / "mutation" / f"{ROOT.name}-{key}{'-cluster' if cluster else ''}"


def staged(path: str) -> str:
    """operator/disttrain/api/x.py -> disttrain/api/x.py"""
    head, _, rest = path.partition("/")
    return rest if head in SOURCE_ROOTS else path


def sync(src: Path, dst: Path) -> None:
    """Mirror src into dst, touching only files whose content changed (mutmut reads mtimes)."""
    if src.is_file():
        if not dst.exists() or not filecmp.cmp(src, dst, shallow=False):
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
        return
    wanted = set()
    for path in src.rglob("*"):
        if "__pycache__" in path.parts or path.suffix == ".pyc" or ".hypothesis" in path.parts:
            continue
        rel = path.relative_to(src)
        wanted.add(rel)
        if path.is_file():
            sync(path, dst / rel)
    if dst.exists():
        for path in sorted(dst.rglob("*"), reverse=True):
            rel = path.relative_to(dst)
            if rel not in wanted and "__pycache__" not in rel.parts and ".hypothesis" not in rel.parts:
                shutil.rmtree(path) if path.is_dir() else path.unlink()


# mutmut stops a mutant's run after (the call time of its tests, from its stats, + this
# constant) x 15 seconds of wall time. The call time leaves out each test's fixtures (a
# namespace made and deleted, a fake worker's pods), most of a cluster test's wall time: a
# survivor of the log functions took up to 14 times it, and on shared cores more, so with
# mutmut's 1 s (a 15 s floor) a survivor could be cut off and read as a timeout (a catch).
# 8 s raises the floor to 2 minutes. Changing it makes mutmut test its timeouts again.
TIMEOUT_CONSTANT = 8.0
# A hang is caught sooner by the test that hangs: each test's own call (pytest-timeout, its
# fixtures left out, so a test waiting its turn at the CRD lock is not counted) fails after
# this many seconds, a kill. The longest call of these tests is 13 s alone on 2 cores; with
# 8 jobs sharing them, a few times that. mutmut's limit, summed over a function's tests,
# stays behind it for a hang outside a test's call.
TEST_CALL_LIMIT = 120


def but_limits(config: str) -> str:
    """A written pyproject.toml without its time limits (TIMEOUT_CONSTANT, TEST_CALL_LIMIT)."""
    return "\n".join(line for line in config.splitlines() if not line.startswith("timeout"))


def pyproject(sources: list[str], tests: list[str]) -> str:
    return f"""# Written by hack/mutation.py for mutmut; the checkout's pyproject.toml is the real one.
[tool.pytest.ini_options]
addopts = "-p no:cacheprovider"
pythonpath = ["."]
markers = ["cluster: real control plane", "dist: torch.distributed", "slow: slow", "changes_crd: runs alone"]
timeout = {TEST_CALL_LIMIT}
timeout_func_only = true

[tool.mutmut]
source_paths = {json.dumps(sources)}
pytest_add_cli_args_test_selection = {json.dumps(tests)}
also_copy = {json.dumps(sorted({package for _, package in SOURCE_PACKAGES} | set(data_entries()) | {"conftest.py"}))}
do_not_mutate_patterns = {json.dumps(NOT_MUTATED)}
timeout_constant = {TIMEOUT_CONSTANT}
"""


# mutmut hands a mutant's tests to pytest and stops at the first failure (-x). The order
# decides the cost: a mutant a unit test kills should not wait for the cluster tests that
# also reach it, and a mutant of a function that only one test tells apart (a help text of
# the argparse table: the CLI reference test) should not wait for a hundred quick tests that
# cannot. So the tests that killed mutants of the same function before come first, best
# kill rate per second first; then the rest, quickest first (durations from mutmut's stats).
# Each kill is appended to mutmut-kills.jsonl (in mutants/, beside the stats).
QUICKEST_FIRST = """# Written by hack/mutation.py: a mutant's tests, likeliest killer first.
import json
import os
from collections import Counter
from pathlib import Path

import pytest

KILLS = Path("mutmut-kills.jsonl")
TESTING = "DISTTRAIN_MUTATION_TEST_PID"

# Code that ends the process (os._exit: argcomplete's default once it has answered) would end
# the mutant's run with its own exit code, and 0 reads as "survived". Ended in a test's own
# process (not a child it forked), the run did not pass: exit 1, a kill. Installed once, before
# the code under test binds os._exit, and kept across mutmut's repeated pytest.main calls.
if not getattr(os._exit, "ends_a_test", False):
    def _exit(code, _real=os._exit):
        _real(1 if os.environ.get(TESTING) == str(os.getpid()) else code)

    _exit.ends_a_test = True
    os._exit = _exit


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    os.environ[TESTING] = str(os.getpid())
    try:
        yield
    finally:
        os.environ.pop(TESTING, None)


def _function(mutant):
    return mutant.rsplit("__mutmut_", 1)[0] if "__mutmut_" in mutant else None


def pytest_collection_modifyitems(items):
    stats = Path("mutmut-stats.json")
    durations = json.loads(stats.read_text()).get("duration_by_test", {}) if stats.exists() else {}
    function, kills = _function(os.environ.get("MUTANT_UNDER_TEST", "")), Counter()
    if function and KILLS.exists():
        for line in KILLS.read_text().splitlines():
            try:
                mutant, test = json.loads(line)
            except ValueError:
                continue  # a line cut short by a killed run
            if _function(mutant) == function:
                kills[test] += 1

    def cost(item):
        duration = durations.get(item.nodeid, float("inf"))
        return (0, duration / kills[item.nodeid]) if kills[item.nodeid] else (1, duration)

    items.sort(key=cost)


def pytest_runtest_logreport(report):
    mutant = os.environ.get("MUTANT_UNDER_TEST", "")
    if report.failed and _function(mutant):
        with KILLS.open("a") as handle:  # one short append per line: whole lines under parallel jobs
            handle.write(json.dumps([mutant, report.nodeid]) + "\\n")
"""


def tree_hash(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for base in paths:
        for path in sorted(base.rglob("*.py")) if base.is_dir() else [base]:
            if path.is_file():
                digest.update(str(path.relative_to(ROOT)).encode() + path.read_bytes())
    return digest.hexdigest()


def meta_files(work: Path) -> list[Path]:
    return sorted((work / "mutants").rglob("*.py.meta"))


def read_meta(meta: Path) -> dict:
    """mutmut's verdicts for one source file; a file cut short (mutmut killed while writing
    it) is dropped, so its module is mutated afresh, instead of stopping every later run."""
    try:
        return json.loads(meta.read_text())
    except ValueError:
        print(f"mutation: {meta} is unreadable, dropping it (its mutants are tested again)", file=sys.stderr)
        meta.unlink()
        return {}


def undecided(work: Path, paths: list[str]) -> list[str]:
    """Mutants of these modules without a verdict (mutmut re-runs every mutant it is
    given by name, so a partial run names only those), or a module's glob when none of its
    mutants is known yet (its first run)."""
    codes = {key: code for meta in meta_files(work)
             for key, code in read_meta(meta).get("exit_code_by_key", {}).items()}
    names = []
    for path in paths:
        glob = module_glob(path)
        mine = {key: code for key, code in codes.items() if key.startswith(glob.removesuffix("*"))}
        names += [key for key, code in mine.items() if code is None] if mine else [glob]
    return names


def forget(work: Path, which: Callable[[str, int | None], bool]) -> int:
    """Forget each verdict `which(mutant, exit code)` names, so the next run tests that
    mutant again; how many."""
    count = 0
    for meta in meta_files(work):
        data = read_meta(meta)
        if not data:
            continue
        codes = data.get("exit_code_by_key", {})
        for key, code in codes.items():
            if code is not None and which(key, code):
                codes[key] = None
                count += 1
        meta.write_text(json.dumps(data, indent=4))
    return count


def retest(work: Path, statuses: tuple[str, ...] = ("survived", "no tests")) -> int:
    """Forget the verdicts of these statuses, so the next run tests those mutants again:
    survivors and mutants without tests when the tests changed, timeouts when the limit did.
    A survivor judged equivalent, and still the change judged (its pin), keeps its verdict:
    no test can tell it, and running it again costs a pass of every test of its function."""
    equivalent = load_equivalent()

    def judged(key: str) -> bool:
        pin = equivalent.get(key, (None, ""))[0]
        return pin is not None and pin == diff_pin(mutant_diff(work, key))

    return forget(work, lambda key, code: STATUS.get(code) in statuses and not judged(key))


def forget_kills(work: Path, test: str) -> int:
    """Forget the kills whose last recorded killer (mutmut-kills.jsonl) is `test`, a pytest
    node id, so the next run tests those mutants again: a test that failed for a reason of
    its own (one not isolated from a copy of itself under parallel jobs) counted every
    mutant it met as killed, and the learned order then ran it first for more of them."""
    killer, kills = {}, work / "mutants" / "mutmut-kills.jsonl"
    for line in kills.read_text().splitlines() if kills.exists() else ():
        try:
            mutant, by = json.loads(line)
        except ValueError:
            continue  # a line cut short by a killed run
        killer[mutant] = by
    return forget(work, lambda key, code: STATUS.get(code) == "killed" and killer.get(key) == test)


# An equivalent entry is pinned to the change it judged: mutmut numbers a function's mutants
# in order, so when the function changes, the number listed may name another change (one a
# test could catch) and would hide it. `NAME [diff:PIN] reason`, PIN from `diff_pin`.
PIN = re.compile(r"\[diff:([0-9a-f]{8})\]\s*")


def diff_pin(diff: str) -> str:
    """The pin of a mutant's diff (`mutant_diff`): 8 hex digits of its hash."""
    return hashlib.sha256(diff.encode()).hexdigest()[:8]


def load_equivalent() -> dict[str, tuple[str | None, str]]:
    """name -> (its pin, or None where the entry has none yet; the reason). No list: none."""
    out = {}
    text = EQUIVALENT_FILE.read_text() if EQUIVALENT_FILE.exists() else ""
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, rest = line.partition(" ")
            rest = rest.strip()
            pinned = PIN.match(rest)
            reason = rest[pinned.end():] if pinned else rest
            out[name] = (pinned.group(1) if pinned else None,
                         reason.strip().lstrip("#").strip() or "(no reason given)")
    return out


def pin_equivalents(work: Path) -> int:
    """Pin every unpinned entry whose mutant this work tree has to that mutant's diff now.
    A stale pin is never renewed here: that mutant must be judged again by a person."""
    codes = {key for meta in meta_files(work) for key in read_meta(meta).get("exit_code_by_key", {})}
    lines, pinned = [], 0
    for line in EQUIVALENT_FILE.read_text().splitlines():
        name, _, rest = line.partition(" ")
        if line.strip() and not line.startswith("#") and name in codes and not PIN.match(rest):
            diff = mutant_diff(work, name)
            if diff:
                line, pinned = f"{name} [diff:{diff_pin(diff)}] {rest}", pinned + 1
        lines.append(line)
    EQUIVALENT_FILE.write_text("\n".join(lines) + "\n")
    print(f"mutation: pinned {pinned} equivalent entries to their mutant's diff in {EQUIVALENT_FILE.name}")
    return 0


def module_glob(path: str) -> str:
    """operator/disttrain/api -> disttrain.api.* (mutmut's mutant names)"""
    return staged(path).removesuffix(".py").rstrip("/").replace("/", ".") + ".*"


@functools.cache
def _functions(path: Path) -> dict[str, str]:
    """Source of every function in a mutmut output file, by name (parsed once per file)."""
    try:
        source = path.read_text()
        tree = ast.parse(source)
    except (OSError, SyntaxError):
        return {}
    lines = source.splitlines()
    return {node.name: "\n".join(lines[node.lineno - 1:node.end_lineno]) for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and "__mutmut_" in node.name}


def mutant_diff(work: Path, key: str) -> str:
    """The mutant's changed lines against the original function."""
    module, _, func = key.rpartition(".")
    functions = _functions(work / "mutants" / (module.replace(".", "/") + ".py"))
    original = functions.get(func.rsplit("__mutmut_", 1)[0] + "__mutmut_orig", "")
    mutated = functions.get(func, "")
    lines = [line for line in difflib.unified_diff(original.splitlines(), mutated.splitlines(), lineterm="", n=0)
             if line[:1] in "+-" and not line.startswith(("+++", "---")) and "__mutmut_" not in line]
    return "\n".join("        " + line.strip() for line in lines)


def report(work: Path, selected: list[str]) -> int:
    equivalent = load_equivalent()
    rows: dict[str, Counter] = {}
    survivors, moved, unpinned = [], [], []
    seen = set()
    prefixes = tuple(module_glob(p).removesuffix("*") for p in selected)
    for meta in meta_files(work):
        data = read_meta(meta)
        for key, code in sorted(data.get("exit_code_by_key", {}).items()):
            module = key.split(".x_")[0] if ".x_" in key else key.split(".xǁ")[0]
            if not (module + ".").startswith(prefixes):
                continue
            seen.add(key)
            row = rows.setdefault(module, Counter())
            row["mutants"] += 1
            status = STATUS.get(code, "suspicious")
            if status == "survived" and key in equivalent:
                pin = equivalent[key][0]
                if pin is None or pin == diff_pin(mutant_diff(work, key)):
                    status = "equivalent"
                    if pin is None:
                        unpinned.append(key)
                else:
                    moved.append(key)
            row[status] += 1
            if status in ("survived", "no tests", "timeout", "suspicious"):
                survivors.append((key, status))
    cols = ["mutants", "killed", "survived", "equivalent", "no tests", "timeout", "not checked"]
    print(f"{'module':44} " + " ".join(f"{c:>9}" for c in cols) + "     score")
    total = Counter()
    for module in sorted(rows):
        row = rows[module]
        total.update(row)
        print(f"{module:44} " + " ".join(f"{row[c]:>9}" for c in cols) + f"   {score(row):>6.1%}")
    print(f"{'TOTAL':44} " + " ".join(f"{total[c]:>9}" for c in cols) + f"   {score(total):>6.1%}")
    print("score = killed / (mutants - equivalent)")
    if survivors:
        print(f"\nsurviving mutants ({len(survivors)}): `cd {work} && mutmut show NAME` for the whole function")
        for key, status in survivors:
            print(f"  {key} [{status}]")
            diff = mutant_diff(work, key)
            if diff:
                print(diff)
    if moved:
        print(f"\nlisted as equivalent, but no longer the change its reason judged (its function changed "
              f"and the number moved): counted as survived; judge each again ({len(moved)}): "
              f"{', '.join(moved)}")
    if unpinned:
        print(f"\nequivalent entries without a [diff:] pin ({len(unpinned)}): "
              f"`python hack/mutation.py --pin-equivalents{' --cluster' if work.name.endswith('-cluster') else ''}` "
              "pins them to the change each names now")
    stale = sorted(k for k in equivalent if k not in seen and k.startswith(prefixes))
    if stale:
        print(f"\nequivalent entries naming no current mutant (remove them): {', '.join(stale)}")
    return 0


def score(row: Counter) -> float:
    judged = row["mutants"] - row["equivalent"]
    return row["killed"] / judged if judged else 1.0


def run_mutmut(work: Path, env: dict[str, str], jobs: int, paths: list[str], *, every: bool,
               skip: str | None = None) -> int:
    """mutmut run over every module (`every`), or until each mutant of `paths` has a verdict
    (but those whose name `skip` matches: they stay "not checked")."""
    mutmut = Path(sys.executable).with_name("mutmut")
    tried: set[str] = set()
    while True:
        # A changed function's mutants get their names only when mutmut generates them,
        # during a run: run again for those until every mutant named has a verdict.
        names = [] if every else [n for n in undecided(work, paths)
                                  if n not in tried and not (skip and re.search(skip, n))]
        if not every and not names:
            if not tried:
                print("mutation: every mutant of these modules has a verdict", flush=True)
            return 0
        tried.update(names)
        # Its own process group: stopping this run stops mutmut and its test children first,
        # before the control plane goes; left running, they would read its absence as kills.
        proc = subprocess.Popen([str(mutmut), "run", "--max-children", str(jobs), *names], cwd=work, env=env,
                                start_new_session=True)
        try:
            code = proc.wait()
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        if code != 0:
            print(f"mutation: mutmut exited {code}", file=sys.stderr)
            return code
        if every:
            return 0


@contextlib.contextmanager
def control_plane(work: Path) -> Iterator[str]:
    """A control plane of its own for a --cluster run; yields its kubeconfig. Down at the
    end, and by hack/cluster.sh's reaper should this process be killed first."""
    name = f"mutation-{work.name}"
    env = {**os.environ, "DISTTRAIN_CLUSTER_OWNER_PID": str(os.getpid()),
           "DISTTRAIN_CLUSTER_DIR": str(CACHE / "clusters" / name)}
    print(f"mutation: starting control plane {name}", flush=True)
    try:
        subprocess.run(["bash", str(ROOT / "hack" / "cluster.sh"), "up", name], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        yield str(CACHE / "clusters" / name / "kubeconfig")
    finally:
        subprocess.run(["bash", str(ROOT / "hack" / "cluster.sh"), "down", name], env=env,
                       stdout=subprocess.DEVNULL)


def main() -> int:
    # A stop (SIGTERM) unwinds like Ctrl-C: mutmut is stopped, then the control plane.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*")
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("MUTATION_JOBS", "1")))
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--cluster", action="store_true", help="the client, against a control plane of its own")
    parser.add_argument("--pin-equivalents", action="store_true", help="pin each unpinned entry of "
                        "hack/mutation-equivalent.txt to the diff of the mutant it names now; runs nothing")
    parser.add_argument("--skip", metavar="REGEX", help="leave the mutants whose name matches unrun (not checked), "
                        "e.g. functions every test reaches, whose each mutant costs a pass of them all")
    parser.add_argument("--forget-kills-by", metavar="TEST", help="test again the mutants whose last kill "
                        "was by this test (its pytest node id): one found to fail for a reason of its own")
    args = parser.parse_args()
    modules, tests = (CLUSTER_MODULES, CLUSTER_TESTS) if args.cluster else (MODULES, TESTS)
    args.paths = args.paths or modules
    work = work_dir(args.cluster)
    work.mkdir(parents=True, exist_ok=True)
    print(f"mutation: work tree {work}", flush=True)
    if args.pin_equivalents:
        return pin_equivalents(work)
    if args.forget_kills_by:
        print(f"mutation: re-testing {forget_kills(work, args.forget_kills_by)} mutants killed by "
              f"{args.forget_kills_by}", flush=True)
    if not args.report_only:
        for root, package in SOURCE_PACKAGES:
            sync(ROOT / root / package, work / package)
        for name in data_entries():
            sync(ROOT / name, work / name)
        # Always every module: a changed mutmut configuration would drop every verdict.
        config = pyproject([staged(p) for p in modules], tests)
        old = (work / "pyproject.toml").read_text() if (work / "pyproject.toml").exists() else config
        if but_limits(old) != but_limits(config):
            # A newly listed module has no test mapped to its functions: collect the stats
            # again, and test again the mutants judged "no tests" or "survived" without them.
            (work / "mutants" / "mutmut-stats.json").unlink(missing_ok=True)
            print(f"mutation: modules changed, re-testing {retest(work)} undecided mutants", flush=True)
        elif old != config:
            print(f"mutation: the time limit changed, re-testing {retest(work, ('timeout',))} timeouts",
                  flush=True)
        (work / "pyproject.toml").write_text(config)
        if not (work / "conftest.py").exists() or (work / "conftest.py").read_text() != QUICKEST_FIRST:
            (work / "conftest.py").write_text(QUICKEST_FIRST)
        tests_now = tree_hash([ROOT / "tests" / "unit", ROOT / "tests" / "trainer"]
                              + ([CLIENT_CLUSTER_TESTS, CLI_CLUSTER_TESTS] if args.cluster else []))
        stamp = work / ".tests-hash"
        if meta_files(work) and (not stamp.exists() or stamp.read_text() != tests_now):
            # mutmut maps functions to tests once and then refreshes that map only for the test
            # files whose own source changed: a changed helper (one that now runs the CLI
            # in-process, say) would leave its callers' new reach unseen. Map them all again.
            (work / "mutants" / "mutmut-stats.json").unlink(missing_ok=True)
            print(f"mutation: tests changed, re-testing {retest(work)} surviving mutants", flush=True)
        env = {**os.environ, "PYTHONPATH": "", "DISTTRAIN_HYPOTHESIS_SCALE": "0.1"}
        with control_plane(work) if args.cluster else contextlib.nullcontext() as kubeconfig:
            if kubeconfig:
                # mutmut runs tests in parallel processes: a test that changes the CRD runs alone.
                env.update(DISTTRAIN_TEST_KUBECONFIG=kubeconfig, DISTTRAIN_CRD_LOCK=str(work / ".crd.lock"))
            code = run_mutmut(work, env, args.jobs, args.paths, every=args.paths == modules and not args.skip,
                              skip=args.skip)
        if code != 0:
            return code
        stamp.write_text(tests_now)
    return report(work, args.paths)


if __name__ == "__main__":
    sys.exit(main())

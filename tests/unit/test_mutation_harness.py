"""hack/mutation.py's verdicts: an equivalent mutant is one change judged by a person, and
stays that change (its pin) when its function changes and mutmut numbers the mutants anew."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HACK = Path(__file__).resolve().parents[2] / "hack" / "mutation.py"
ORIGINAL = '''def x_f__mutmut_orig(a):
    return a + 1
'''


@pytest.fixture()
def harness(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("mutation_harness", HACK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "EQUIVALENT_FILE", tmp_path / "equivalent.txt")
    module._functions.cache_clear()
    return module


def work_tree(root: Path, mutant: str, code: int = 0) -> Path:
    """A mutmut work tree with one module, pkg/mod.py, whose x_f has one mutant (`mutant`,
    the new line of its body) with exit code `code` (0: survived)."""
    (root / "mutants" / "pkg").mkdir(parents=True, exist_ok=True)
    (root / "mutants" / "pkg" / "mod.py").write_text(
        ORIGINAL + f"\n\ndef x_f__mutmut_1(a):\n    {mutant}\n")
    (root / "mutants" / "pkg" / "mod.py.meta").write_text(
        json.dumps({"exit_code_by_key": {"pkg.mod.x_f__mutmut_1": code}}))
    return root


def test_an_equivalent_is_pinned_to_the_change_it_names_and_counted_while_that_holds(harness, tmp_path, capsys):
    work = work_tree(tmp_path / "work", "return a - 1")
    harness.EQUIVALENT_FILE.write_text("# header\npkg.mod.x_f__mutmut_1 a - 1 reads the same here\n")
    harness.report(work, ["pkg/mod.py"])
    assert "equivalent entries without a [diff:] pin (1)" in capsys.readouterr().out
    assert harness.pin_equivalents(work) == 0
    pin = harness.diff_pin("        -    return a + 1\n        +    return a - 1")
    assert harness.EQUIVALENT_FILE.read_text() == (
        f"# header\npkg.mod.x_f__mutmut_1 [diff:{pin}] a - 1 reads the same here\n")
    assert harness.load_equivalent() == {"pkg.mod.x_f__mutmut_1": (pin, "a - 1 reads the same here")}
    capsys.readouterr()
    harness.report(work, ["pkg/mod.py"])
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("pkg.mod "))
    assert row.split()[1:5] == ["1", "0", "0", "1"]  # mutants, killed, survived, equivalent
    assert "without a [diff:] pin" not in out and "surviving mutants" not in out


def test_an_equivalent_whose_number_now_names_another_change_counts_as_a_survivor(harness, tmp_path, capsys):
    work = work_tree(tmp_path / "work", "return a - 1")
    harness.EQUIVALENT_FILE.write_text("pkg.mod.x_f__mutmut_1 a - 1 reads the same here\n")
    harness.pin_equivalents(work)
    pinned = harness.EQUIVALENT_FILE.read_text()
    harness._functions.cache_clear()
    work_tree(tmp_path / "work", "return None")  # the function changed: mutant 1 is another change
    capsys.readouterr()
    harness.report(work, ["pkg/mod.py"])
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("pkg.mod "))
    assert row.split()[1:5] == ["1", "0", "1", "0"]
    assert "no longer the change its reason judged" in out and "+    return None" in out
    harness.pin_equivalents(work)  # a stale pin is never renewed by the tool
    assert harness.EQUIVALENT_FILE.read_text() == pinned


def test_a_killed_mutant_listed_as_equivalent_is_killed_and_the_list_is_read_as_written(harness, tmp_path, capsys):
    work = work_tree(tmp_path / "work", "return a - 1", code=1)
    harness.EQUIVALENT_FILE.write_text("pkg.mod.x_f__mutmut_1 [diff:0123abcd]   # why\npkg.mod.x_g__mutmut_2\n")
    assert harness.load_equivalent() == {"pkg.mod.x_f__mutmut_1": ("0123abcd", "why"),
                                         "pkg.mod.x_g__mutmut_2": (None, "(no reason given)")}
    harness.report(work, ["pkg/mod.py"])
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("pkg.mod "))
    assert row.split()[1:5] == ["1", "1", "0", "0"]
    assert "naming no current mutant (remove them): pkg.mod.x_g__mutmut_2" in out


def test_a_mutants_tests_run_likeliest_killer_first_and_each_kill_is_recorded(harness, tmp_path, monkeypatch):
    """The conftest the harness gives mutmut: the tests that killed mutants of the same
    function before come first (best kills per second first), then the rest quickest first."""
    conftest: dict = {}
    monkeypatch.setattr(os, "_exit", os._exit)  # the conftest guards it: this process gets its own back
    exec(compile(harness.QUICKEST_FIRST, "conftest.py", "exec"), conftest)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mutmut-stats.json").write_text(json.dumps({"duration_by_test": {
        "quick": 0.1, "quicker": 0.05, "reference": 2.0, "cluster": 60.0, "killer-elsewhere": 0.01}}))

    class Item:
        def __init__(self, nodeid):
            self.nodeid = nodeid

    def order():
        items = [Item(n) for n in ("cluster", "quick", "reference", "unmeasured", "quicker", "killer-elsewhere")]
        conftest["pytest_collection_modifyitems"](items)
        return [i.nodeid for i in items]

    monkeypatch.setenv("MUTANT_UNDER_TEST", "pkg.mod.x_f__mutmut_7")
    assert order() == ["killer-elsewhere", "quicker", "quick", "reference", "cluster", "unmeasured"]

    class Report:
        def __init__(self, nodeid, failed):
            self.nodeid, self.failed = nodeid, failed

    for mutant, test in (("pkg.mod.x_f__mutmut_1", "reference"), ("pkg.mod.x_f__mutmut_2", "reference"),
                         ("pkg.mod.x_f__mutmut_3", "cluster"), ("pkg.mod.x_g__mutmut_1", "killer-elsewhere")):
        monkeypatch.setenv("MUTANT_UNDER_TEST", mutant)
        conftest["pytest_runtest_logreport"](Report(test, failed=True))
        conftest["pytest_runtest_logreport"](Report("quick", failed=False))  # a pass is no kill
    monkeypatch.setenv("MUTANT_UNDER_TEST", "stats")  # mutmut's own runs are no mutant's
    conftest["pytest_runtest_logreport"](Report("quicker", failed=True))
    with (tmp_path / "mutmut-kills.jsonl").open("a") as kills:
        kills.write('["pkg.mod.x_f__mutmut_9", "qu')  # a line cut short by a killed run
    assert len((tmp_path / "mutmut-kills.jsonl").read_text().splitlines()) == 5
    monkeypatch.setenv("MUTANT_UNDER_TEST", "pkg.mod.x_f__mutmut_7")
    # reference: 2 kills in 2 s (1 s a kill); cluster: 1 in 60 s; then the rest, quickest first
    assert order() == ["reference", "cluster", "killer-elsewhere", "quicker", "quick", "unmeasured"]


def test_a_test_that_ends_its_process_is_a_kill_and_a_child_it_forked_ends_as_it_says(harness, tmp_path):
    """Code under test that calls os._exit(0) (argcomplete's default once it has answered)
    would end the mutant's run with 0, read as "survived": in the test's own process the
    conftest makes it 1. Outside a test, and in a child the test forked, the code stands."""
    (tmp_path / "conftest.py").write_text(harness.QUICKEST_FIRST)
    program = """
import os, sys
conftest = {}
exec(compile(open("conftest.py").read(), "conftest.py", "exec"), conftest)
exec(compile(open("conftest.py").read(), "conftest.py", "exec"), conftest)  # pytest.main again
call = conftest["pytest_runtest_call"](None)
next(call)  # a test runs
child = os.fork()
if child == 0:
    os._exit(7)  # a child of the test's (multiprocessing's fork) ends as it says
print(os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]), flush=True)
if sys.argv[1] == "after":
    call.close()  # the test is over: mutmut's own os._exit(result) stands
os._exit(0)
"""
    for when, code in (("in", 1), ("after", 0)):
        run = subprocess.run([sys.executable, "-c", program, when], cwd=tmp_path, capture_output=True, text=True)
        assert (run.returncode, run.stdout) == (code, "7\n"), run.stderr


def test_a_test_whose_own_call_hangs_fails_and_a_slow_fixture_does_not(harness, tmp_path, monkeypatch):
    """The pytest section the harness writes: a test's call that runs past TEST_CALL_LIMIT
    fails (a kill, not mutmut's slower timeout); time spent in its fixtures (a turn at the
    CRD lock) is not counted."""
    monkeypatch.setattr(harness, "data_entries", lambda: ["docs"])
    monkeypatch.setattr(harness, "TEST_CALL_LIMIT", 1)
    (tmp_path / "pyproject.toml").write_text(harness.pyproject(["pkg/mod.py"], ["tests"]))
    (tmp_path / "test_limit.py").write_text(
        "import time\nimport pytest\n\n\n@pytest.fixture\ndef turn():\n    time.sleep(2)\n\n\n"
        "def test_waits_its_turn(turn):\n    pass\n\n\ndef test_hangs():\n    time.sleep(30)\n")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_limit.py"],
                         cwd=tmp_path, capture_output=True, text=True)
    assert "1 failed, 1 passed" in run.stdout and "Timeout (>1.0s)" in run.stdout, run.stdout + run.stderr


def test_changed_tests_run_the_survivors_again_but_a_pinned_equivalent(harness, tmp_path):
    work = work_tree(tmp_path / "work", "return a - 1")
    meta = work / "mutants" / "pkg" / "mod.py.meta"
    codes = {"pkg.mod.x_f__mutmut_1": 0, "pkg.mod.x_f__mutmut_2": 0, "pkg.mod.x_f__mutmut_3": 1}
    meta.write_text(json.dumps({"exit_code_by_key": codes}))
    harness.EQUIVALENT_FILE.write_text("pkg.mod.x_f__mutmut_1 a - 1 reads the same here\n")
    assert harness.retest(work) == 2  # unpinned: not yet the change judged, so tested again
    meta.write_text(json.dumps({"exit_code_by_key": codes}))
    harness.pin_equivalents(work)
    assert harness.retest(work) == 1
    assert json.loads(meta.read_text())["exit_code_by_key"] == {**codes, "pkg.mod.x_f__mutmut_2": None}


def test_a_changed_time_limit_tests_the_timeouts_again_and_keeps_every_other_verdict(harness, tmp_path,
                                                                                      monkeypatch):
    monkeypatch.setattr(harness, "data_entries", lambda: ["docs"])  # no git checkout in a mutation work tree
    work = work_tree(tmp_path / "work", "return a - 1")
    meta = work / "mutants" / "pkg" / "mod.py.meta"
    meta.write_text(json.dumps({"exit_code_by_key": {"pkg.mod.x_f__mutmut_1": 0, "pkg.mod.x_f__mutmut_2": 1,
                                                     "pkg.mod.x_f__mutmut_3": -24, "pkg.mod.x_f__mutmut_4": 33}}))
    written = harness.pyproject(["pkg/mod.py"], ["tests"])
    assert "timeout_constant = 8.0" in written
    assert harness.but_limits(written) == harness.but_limits(written.replace("= 8.0", "= 1.0"))
    assert harness.but_limits(written) == harness.but_limits(written.replace("timeout = 120", "timeout = 60"))
    assert harness.but_limits(written) != harness.but_limits(harness.pyproject(["pkg/other.py"], ["tests"]))
    assert harness.retest(work, ("timeout",)) == 1
    assert json.loads(meta.read_text())["exit_code_by_key"] == {
        "pkg.mod.x_f__mutmut_1": 0, "pkg.mod.x_f__mutmut_2": 1, "pkg.mod.x_f__mutmut_3": None,
        "pkg.mod.x_f__mutmut_4": 33}
    assert harness.retest(work) == 2  # survived and no tests


def test_the_kills_of_a_test_found_wrong_are_forgotten_and_no_other_verdict(harness, tmp_path):
    """A test that failed for a reason of its own (not isolated from a copy of itself)
    counted what it met as killed: its kills, and only those that it made last, are tested
    again; a survivor, a timeout and another test's kill keep their verdicts."""
    work = work_tree(tmp_path / "work", "return a - 1")
    meta = work / "mutants" / "pkg" / "mod.py.meta"
    codes = {f"pkg.mod.x_f__mutmut_{n}": code for n, code in enumerate((1, 1, 1, 0, -24, 1), start=1)}
    meta.write_text(json.dumps({"exit_code_by_key": codes}))
    wrong, right = "tests/t.py::test_shared", "tests/t.py::test_good"
    lines = [["pkg.mod.x_f__mutmut_1", wrong], ["pkg.mod.x_f__mutmut_2", wrong], ["pkg.mod.x_f__mutmut_2", right],
             ["pkg.mod.x_f__mutmut_3", right], ["pkg.mod.x_f__mutmut_4", wrong], ["pkg.mod.x_f__mutmut_5", wrong]]
    (work / "mutants" / "mutmut-kills.jsonl").write_text(
        "".join(json.dumps(line) + "\n" for line in lines) + '["pkg.mod.x_f__mutmut_6", "tests/t.py::te')
    assert harness.forget_kills(work, wrong) == 1
    assert json.loads(meta.read_text())["exit_code_by_key"] == {**codes, "pkg.mod.x_f__mutmut_1": None}

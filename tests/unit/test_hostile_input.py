"""Input nobody here wrote: alias bombs, duplicate keys, deep nesting, huge and non-finite
numbers, wrong types at every level, unicode, special files. The CLI and the operator
share `documents.load_documents` (files) and `api.validate_document` (every object):
neither may raise, hang or grow without bound, and every error names its field or line."""

from __future__ import annotations

import copy
import os
import sys
import tracemalloc

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from disttrain.api import validate_document
from disttrain.api.parse import check_job_name
from disttrain.client.documents import DocumentError, load_documents

from .conftest import EXAMPLES, examples
from .helpers import disttrain_process, errors_of, job, write

HEAD = "apiVersion: disttrain.dev/v1alpha1\nkind: DistributedTraining\nmetadata: {name: demo}\n"


def deep_dict(depth: int) -> dict:
    """{a: {a: ... 1}} built without recursion."""
    value: object = 1
    for _ in range(depth):
        value = {"a": value}
    return value


def alias_bomb(levels: int = 9, fanout: int = 10) -> str:
    lines = ['l0: &l0 ["x"]']
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * fanout) + "]")
    return "\n".join(lines) + f"\n{HEAD}spec:\n  scheduling:\n    affinity: {{x: *l{levels - 1}}}\n"


# Work is counted in Python function calls, not timed: a count does not depend on how busy
# the machine is, and a runaway walk (10^9 values behind shared references) is stopped at
# the cap instead of hanging the suite. The heaviest fixed input here takes about 350,000
# (measured); the cap leaves room for what hypothesis draws.
CALLS_CAP = 5_000_000


class TooMuchWork(AssertionError):
    pass


def bounded(run):
    """run() within CALLS_CAP function calls and 64 MiB of Python allocations (traced apart,
    as tracing slows it down several times); returns its result."""
    calls = 0

    def count(_frame, event, _arg):
        nonlocal calls
        if event in ("call", "c_call"):
            calls += 1
            if calls > CALLS_CAP:
                raise TooMuchWork(f"more than {CALLS_CAP} calls")

    sys.setprofile(count)
    try:
        result = run()
    finally:
        sys.setprofile(None)
    tracemalloc.start()
    try:
        run()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20, f"allocated {peak / 2**20:.0f} MiB"
    return result


# ---- the table of hostile files (the closing note's table comes from these) ---------

HOSTILE = [
    ("alias bomb (10^8 values from 9 lines)", alias_bomb(), "holds more than 50000 values (an alias"),
    ("self-referencing alias", HEAD + "spec:\n  scheduling:\n    affinity: &a {x: [*a]}\n",
     "refers to a node that contains it"),
    ("1100-deep affinity", HEAD + "spec:\n  scheduling:\n    affinity: " + "{a: " * 1100 + "1" + "}" * 1100 + "\n",
     "nested more than 32 levels deep"),
    ("duplicate key", HEAD + "spec:\n  nodes: 1\n  nodes: 4\n",
     "duplicate key 'nodes': first on line 5, again on line 6"),
    ("duplicate key in a flow mapping", HEAD + "spec: {trainer: {builtin: {steps: 1, steps: 2}}}\n",
     "duplicate key 'steps'"),
    ("5000-digit integer", HEAD + "spec:\n  nodes: " + "9" * 5000 + "\n", "an integer of 5000 characters"),
    ("learningRate: .nan", HEAD + "spec:\n  trainer: {builtin: {learningRate: .nan}}\n",
     "spec.trainer.builtin.learningRate: is not a finite number (got nan)"),
    ("learningRate: -.inf", HEAD + "spec:\n  trainer: {builtin: {learningRate: -.inf}}\n",
     "spec.trainer.builtin.learningRate: is not a finite number (got -inf)"),
    ("1.0e+999 in a free-form field", HEAD + "spec:\n  podTemplate: {spec: {x: 1.0e+999}}\n",
     "spec.podTemplate.spec.x: is not a finite number (got inf)"),
    ("nprocPerNode: 100000000000", HEAD + "spec:\n  nprocPerNode: 100000000000\n",
     "spec.nprocPerNode: is out of range (got 100000000000); allowed: an integer from 1 to 128"),
    ("nodes: 100000", HEAD + "spec:\n  nodes: 100000\n",
     "spec.nodes: is out of range (got 100000); allowed: >= 1 and <= 1024 (each worker is a pod"),
    ("gpusPerNode: 65", HEAD + "spec:\n  gpusPerNode: 65\n", "<= 64 (no machine has more GPUs"),
    ("steps: 10^12", HEAD + "spec:\n  trainer: {builtin: {steps: 1000000000000}}\n",
     "spec.trainer.builtin.steps: is out of range (got 1000000000000); allowed: >= 1 and <= 100000000 ("),
    ("batchSize: 10^6", HEAD + "spec:\n  trainer: {builtin: {batchSize: 1000000}}\n",
     "<= 65536 (a micro-batch is per process"),
    ("integer beyond int64 in a free-form field", HEAD + "spec:\n  podTemplate: {spec: {x: 99999999999999999999}}\n",
     "spec.podTemplate.spec.x: is too large"),
    ("checkpoint.path: /tmp", HEAD + "spec:\n  checkpoint: {path: /tmp}\n",
     "spec.checkpoint.path: is or contains the pod's /tmp mount (got '/tmp')"),
    ("checkpoint.path: /dev/shm/ckpt", HEAD + "spec:\n  checkpoint: {path: /dev/shm/ckpt}\n",
     "spec.checkpoint.path: is or contains the pod's memory-backed /dev/shm mount"),
    ("checkpoint.path: /", HEAD + "spec:\n  checkpoint: {path: /}\n", "spec.checkpoint.path: is the root directory"),
    ("checkpoint.path: /proc/x", HEAD + "spec:\n  checkpoint: {path: /proc/x}\n", "collides with /proc"),
    ("checkpoint.path: /a/../tmp", HEAD + "spec:\n  checkpoint: {path: /a/../tmp}\n",
     "spec.checkpoint.path: is not a plain absolute path"),
    ("checkpoint.path: a trainer volumeMount's", HEAD + "spec:\n  checkpoint: {path: /data}\n  podTemplate: {spec: "
     "{containers: [{name: trainer, volumeMounts: [{name: d, mountPath: /data}]}]}}\n",
     "is also the mountPath of spec.podTemplate.spec.containers[0].volumeMounts"),
    ("metadata.name: 123", HEAD.replace("{name: demo}", "{name: 123}"),
     "metadata.name: must be a string (got 123); allowed: a DNS label. Fix: rename it, e.g. 'job-123'"),
    ("metadata.name: unicode", HEAD.replace("{name: demo}", "{name: tränîng-jöb}"),
     "Fix: rename it, e.g. 'tr-n-ng-j-b'"),
    ("metadata.name: CJK only", HEAD.replace("{name: demo}", "{name: 日本語}"), "Fix: rename it, e.g. 'job'"),
    ("a date where a string goes", HEAD + "spec:\n  image: 2024-01-01\n",
     "spec.image: is a date, not a JSON value (got datetime.date(2024, 1, 1))"),
    ("an integer key in affinity", HEAD + "spec:\n  scheduling: {affinity: {1: 2}}\n",
     "spec.scheduling.affinity['1']: has a key that is not a string"),
    ("a python tag", HEAD + "spec: !!python/object:os.system {}\n", "could not determine a constructor"),
    ("a 300 KiB string", HEAD + "spec:\n  podTemplate: {metadata: {annotations: {a: " + "x" * 300_000 + "}}}\n",
     "spec.podTemplate.metadata.annotations.a: is too long (got 'a string of 300000 characters')"),
    ("a binary file", "\x00\x01\x02 not yaml", "not valid YAML"),
]


@pytest.mark.parametrize("what,text,expected", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_file_is_one_clear_line(tmp_path, what, text, expected):
    """In a process of its own, as users run it (the in-process test below bounds the work)."""
    path = write(tmp_path, text)
    result = disttrain_process("validate", path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert expected in result.stdout + result.stderr, result.stdout + result.stderr


@pytest.mark.parametrize("what,text,expected", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_input_in_process_is_bounded(what, text, expected):
    """The same inputs through the library: under 2 s and 64 MiB each, never an exception
    other than DocumentError."""
    def messages() -> list[str]:
        try:
            return [str(e) for d in load_documents("job.yaml", text) for e in validate_document(d.data).errors]
        except DocumentError as exc:
            return [str(exc)]

    assert any(expected in m for m in bounded(messages)), messages()


def test_special_files_are_refused_without_reading_them(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for path, expected in (("/dev/zero", "is not a regular file"), (str(fifo), "is not a regular file"),
                           (str(tmp_path), "is a directory")):
        result = disttrain_process("validate", path)
        assert result.returncode == 1 and expected in result.stderr, result.stderr
        assert "Traceback" not in result.stderr


def test_a_file_over_the_size_limit_is_refused(tmp_path):
    path = write(tmp_path, HEAD + "# " + "x" * (2 * 2**20) + "\n")
    result = disttrain_process("validate", path)
    assert result.returncode == 1 and "bytes; a file of DistributedTrainings is at most" in result.stderr


def test_stdin_is_bounded_too():
    result = disttrain_process("validate", "-", stdin=HEAD + "#" + "x" * (2 * 2**20))
    assert result.returncode == 1 and "is more than 1048576 bytes" in result.stderr


def test_kubectl_get_list_output_is_read_item_by_item(tmp_path):
    items = [yaml.safe_load(HEAD.replace("demo", name)) for name in ("first", "second")]
    path = write(tmp_path, yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items,
                                           "metadata": {"resourceVersion": ""}}))
    result = disttrain_process("validate", path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{path}:3: first: valid" in result.stdout and ": second: valid" in result.stdout


def test_multi_document_files_report_every_document(tmp_path):
    path = write(tmp_path, HEAD + "---\n" + HEAD.replace("demo", "two") + "spec: {nodes: -1}\n")
    result = disttrain_process("validate", path)
    assert result.returncode == 1
    assert f"{path}:1: demo: valid" in result.stdout and f"{path}:5: two: invalid" in result.stdout


def test_aliases_within_the_bound_still_work(tmp_path):
    text = ("common: &env [{name: A, value: '1'}]\n" + HEAD +
            "spec:\n  env: *env\n  podTemplate: {spec: {containers: [{name: side, image: x, env: *env}]}}\n")
    assert load_documents("x", text)[0].data["spec"]["env"] == [{"name": "A", "value": "1"}]


def test_merge_keys_are_not_duplicates():
    text = HEAD + "base: &b {nodes: 2}\nspec:\n  <<: *b\n  nodes: 3\n"
    (doc,) = load_documents("x", text)
    assert doc.data["spec"]["nodes"] == 3


# ---- the operator's path: objects as kopf hands them (no YAML) -----------------------


def test_a_10000_deep_object_is_refused_without_recursion():
    doc = {**job(), "spec": {"scheduling": {"affinity": deep_dict(10_000)}}}
    (message,) = errors_of(doc)
    assert message.startswith("spec.scheduling.affinity.a.a.") and "is nested too deeply" in message


def test_shared_references_cannot_expand_the_walk():
    value: object = ["x"]
    for _ in range(9):
        value = [value] * 10  # 10^9 leaves as Python objects, 90 lists in memory
    (message,) = bounded(lambda: errors_of(job(podTemplate={"spec": {"x": value}})))
    assert "holds too many values" in message and message.startswith("spec.podTemplate.spec.x")


@pytest.mark.parametrize("name,expected", [
    (123, "must be a string"), (True, "must be a string"), ({"a": 1}, "must be a string"),
    ("", "is required"), (None, "is required"), ("Demo", "rename it, e.g. 'demo'"),
    ("9lives", "rename it, e.g. 'job-9lives'"), ("a" * 300, "choose a shorter name, e.g. 'aaaa"),
])
def test_name_errors(name, expected):
    (error,) = check_job_name(name)
    assert expected in str(error)


@settings(max_examples=examples(300), deadline=None)
@given(st.one_of(st.text(max_size=80), st.integers(), st.floats(), st.booleans()))
def test_every_suggested_name_is_itself_valid(name):
    for error in check_job_name(name):
        hint = error.hint
        if "e.g. '" in hint:
            suggestion = hint.split("e.g. '")[1].rstrip("'")
            assert check_job_name(suggestion) == [], (name, suggestion)


# ---- properties with adversarial generators -------------------------------------------

unicode_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
hostile_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True, allow_infinity=True),
    unicode_text, st.sampled_from(["auto", "", "1e999", "-0", "0x10", "日本", "\u202e", "a" * 300]))


def hostile_values(max_leaves: int = 12):
    return st.recursive(hostile_scalars, lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.one_of(unicode_text, st.integers(), st.booleans()),
                                                     inner, max_size=4)), max_leaves=max_leaves)


def check_bounded(doc) -> None:
    """validate_document: no exception, under 2 s, 64 MiB, and each error names its field."""
    result = bounded(lambda: validate_document(doc))
    for error in result.errors:
        assert error.path and str(error).startswith(error.path + ": "), str(error)
        assert len(str(error)) < 2000, str(error)[:200]


def set_at(doc: dict, data, value) -> dict:
    """Put `value` at a random place in `doc`: a known field at any level, or a new key."""
    doc = copy.deepcopy(doc)
    node = doc
    while True:
        keys = sorted(k for k in node if isinstance(k, str)) if isinstance(node, dict) else []
        if not keys or data.draw(st.integers(0, 3)) == 0:
            break
        key = data.draw(st.sampled_from(keys))
        if not isinstance(node[key], dict) or data.draw(st.booleans()):
            node[key] = value
            return doc
        node = node[key]
    node[data.draw(unicode_text)] = value
    return doc


def adversarial_value(data):
    kind = data.draw(st.sampled_from(["deep", "shared", "scalar", "tree", "wide"]))
    if kind == "deep":
        return deep_dict(data.draw(st.one_of(st.integers(20, 40), st.sampled_from([1100, 5000]))))
    if kind == "shared":
        value: object = [data.draw(hostile_scalars)]
        for _ in range(data.draw(st.integers(1, 12))):
            value = [value] * data.draw(st.integers(2, 12))
        return value
    if kind == "wide":
        return {str(i): i for i in range(data.draw(st.sampled_from([0, 100, 50_001])))}
    return data.draw(hostile_values() if kind == "tree" else hostile_scalars)


@settings(max_examples=examples(60), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.sampled_from(EXAMPLES), st.data())
def test_adversarial_values_at_every_level_are_bounded(path, data):
    doc = next(d for d in yaml.safe_load_all(open(path)) if d.get("kind") == "DistributedTraining")
    check_bounded(set_at(doc, data, adversarial_value(data)))


def yaml_text(data) -> str:
    """A document as text with hostile YAML: aliases, duplicate keys, deep flow nesting,
    long digit strings, special floats, unicode keys."""
    name = data.draw(st.sampled_from(["demo", "123", "Ünï", '"x y"', "[a]", "&n a", "*a0"]))
    parts = ["apiVersion: disttrain.dev/v1alpha1", "kind: DistributedTraining", f"metadata: {{name: {name}}}"]
    fanout, levels = data.draw(st.integers(1, 12)), data.draw(st.integers(1, 9))
    parts.insert(0, "a0: &a0 [x]")
    for i in range(1, levels):
        parts.insert(i, f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * fanout) + "]")
    spec = ["spec:"]
    for _ in range(data.draw(st.integers(0, 5))):
        key = data.draw(st.sampled_from(["nodes", "nprocPerNode", "gpusPerNode", "image", "strategy",
                                         "scheduling", "podTemplate", "ünï", "nodes"]))
        value = data.draw(st.one_of(
            st.sampled_from([".nan", ".inf", "-.Inf", "1.0e+999", "0x" + "f" * 30, "9" * 60, "~", "[]", "{}",
                             "!!binary aGk=", "2001-01-01", "*a0", f"*a{levels - 1}", "'日本'"]),
            st.integers(0, 40).map(lambda d: "{x: " * d + "1" + "}" * d),
            st.integers(-2**65, 2**65).map(str)))
        spec.append(f"  {key}: {value}")
    return "\n".join(parts + spec) + "\n"


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_adversarial_yaml_never_raises_and_is_bounded(data):
    text = yaml_text(data)

    def load() -> list:
        try:
            return load_documents("job.yaml", text)
        except DocumentError as exc:
            assert str(exc).startswith("job.yaml:"), str(exc)
            return []

    for doc in bounded(load):
        check_bounded(doc.data)
        for error in validate_document(doc.data).errors:
            assert doc.line_of(error.path) >= 1


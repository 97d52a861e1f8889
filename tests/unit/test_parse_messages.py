"""The parser's words for hostile input, pinned whole: a name that is not a string, a
name that is not a DNS label, a value of the wrong type, a list that is too long or holds
the same key twice. Each line is what `disttrain validate` and the job's InvalidSpec
condition show, so a changed hint or index is a changed user-facing message."""

from __future__ import annotations

import pytest

from disttrain_operator.api.meta import FieldMeta, Shape
from disttrain_operator.api.names import MAX_JOB_NAME_LENGTH
from disttrain_operator.api.parse import _parse_list, _suggest_name, _type_error, check_job_name, dump_object

NOT_A_STRING = "metadata.name: must be a string (got {}); allowed: a DNS label. Fix: "


@pytest.mark.parametrize(("name", "shown", "fix"), [
    (True, "True", 'quote it: name: "true"'),
    (False, "False", 'quote it: name: "false"'),
    (12, "12", "rename it, e.g. 'job-12'"),
    (1.5, "1.5", "rename it, e.g. 'job-1-5'"),
    (10**30 - 1, str(10**30 - 1), f"rename it, e.g. 'job-{10**30 - 1}'"),
    # too large to echo: the hint falls back to a neutral name
    (10**30, "<an integer of 100 bits>", 'quote it: name: "my-job"'),
    (-10**30, "<an integer of 100 bits>", 'quote it: name: "my-job"'),
    ([1], "[1]", 'quote it: name: "my-job"'),
])
def test_a_name_that_is_not_a_string(name, shown, fix):
    assert [str(e) for e in check_job_name(name)] == [NOT_A_STRING.format(shown) + fix]


@pytest.mark.parametrize(("name", "suggestion"), [
    ("My_Job!!x", "my-job-x"),  # a run of other characters is one '-'
    ("9lives", "job-9lives"),  # a letter in front
    ("---", "job"),
    ("ÄBCd", "bcd"),  # non-ASCII letters dropped
    ("x" * (MAX_JOB_NAME_LENGTH - 1) + "-y", "x" * (MAX_JOB_NAME_LENGTH - 1)),  # cut, no '-' at the end
    ("a" * 60, "a" * MAX_JOB_NAME_LENGTH),
    ("A1_x", "a1-x"),  # only the first character must be a letter
    ("7!", "job-7"),
    # only the first 4 x the limit is read (a hostile megabyte name costs nothing)
    ("-" * (4 * MAX_JOB_NAME_LENGTH) + "abc", "job"),
    ("-" * (4 * MAX_JOB_NAME_LENGTH - 1) + "abc", "a"),
])
def test_suggested_names_are_dns_labels_close_to_the_input(name, suggestion):
    assert _suggest_name(name) == suggestion


def test_a_name_that_is_no_dns_label_gets_a_suggestion():
    assert [str(e) for e in check_job_name("Bad_Name")] == [
        "metadata.name: is not a valid DNS-1035 label (got 'Bad_Name'); allowed: lowercase letters, digits and "
        "'-', starting with a letter and ending with a letter or digit (it names a Service). Fix: rename it, "
        "e.g. 'bad-name'"]


@pytest.mark.parametrize(("kind", "raw", "line"), [
    ("str", 5, 'p: must be a string (got 5). Fix: quote it: "5"'),
    ("str", True, 'p: must be a string (got True). Fix: quote it: "true"'),
    ("enum", 1.5, 'p: must be a string (got 1.5). Fix: quote it: "1.5"'),
    ("enum", [], "p: must be a string (got [])"),
    ("int", " 42 ", "p: must be an integer (got ' 42 '). Fix: drop the quotes: 42"),
    ("int", "4x", "p: must be an integer (got '4x')"),
    ("int", 4.0, "p: must be an integer (got 4.0)"),
    ("bool", "yes", "p: must be true or false (got 'yes'). Fix: write true or false without quotes"),
    ("bool", 1, "p: must be true or false (got 1)"),
    ("float", float("inf"), "p: is not a finite number (got inf); allowed: a finite number. Fix: write a number "
                            "such as 0.001"),
    ("float", "x", "p: must be a number (got 'x')"),
    ("list", 3, "p: must be a list (got 3)"),
    ("map", [], "p: must be a mapping (got [])"),
    ("int_or_str", True, "p: must be an integer or a string (got True)"),
])
def test_type_errors_say_what_was_expected_and_how_to_write_it(kind, raw, line):
    assert str(_type_error(kind, raw, "p")) == line


STRINGS = Shape("list", inner=Shape("str"))
ANYTHING = Shape("list", inner=Shape("any"))


def parsed(shape, meta, raw, path="p"):
    value, errors = _parse_list(shape, meta, raw, path)
    return value, [str(e) for e in errors]


def test_max_items_is_inclusive_and_counts_items():
    meta = FieldMeta(doc="d", max_items=2)
    assert parsed(STRINGS, meta, ["a", "b"]) == (["a", "b"], [])
    assert parsed(STRINGS, meta, ["a", "b", "c"]) == (
        ["a", "b", "c"], ["p: has too many items (got '3 items'); allowed: at most 2. Fix: remove some"])
    assert parsed(STRINGS, FieldMeta(doc="d"), ["a"] * 1000)[1] == []  # no limit set


def test_items_are_checked_by_the_item_rules_not_the_lists():
    """The list's own required, pattern and max_items do not apply to each item; its
    length and type rules do."""
    meta = FieldMeta(doc="d", max_items=2, required=True, pattern="^a$", max_length=1)
    assert parsed(STRINGS, meta, ["a", "b", "bb", 3]) == (["a", "b", "bb", None], [
        "p: has too many items (got '4 items'); allowed: at most 2. Fix: remove some",
        "p[2]: is 2 characters long (got 'bb'); allowed: at most 1. Fix: shorten it",
        'p[3]: must be a string (got 3). Fix: quote it: "3"'])


def test_a_list_map_names_each_duplicate_and_its_first():
    meta = FieldMeta(doc="d", list_map_keys=("name",))
    raw = [{"name": "x"}, {"name": "y"}, {"name": "x"}, {"v": 1}, {"v": 2}, "s", {"name": "x"}, {"name": None}]
    value, errors = parsed(ANYTHING, meta, raw, "env")
    assert value == raw
    assert errors == [  # entries without the key (or not mappings) are not duplicates of each other
        "env[2].name: is duplicated (got 'x'); allowed: each name once. Fix: merge it with env[0]",
        "env[6].name: is duplicated (got 'x'); allowed: each name once. Fix: merge it with env[0]"]


def test_free_form_items_are_checked_against_their_kubernetes_schema():
    meta = FieldMeta(doc="d", free_form=True, k8s="io.k8s.api.core.v1.Toleration")
    raw = [{"key": "a"}, {"operator": "Bogus", "tolerationSeconds": "x"}]
    assert parsed(ANYTHING, meta, raw, "t") == (raw, [
        "t[1].operator: is not allowed (got 'Bogus'); allowed: Equal, Exists, Gt, Lt",
        "t[1].tolerationSeconds: must be an integer (got 'x')"])
    # free-form without a schema: mappings pass as written, other items by the item shape
    assert parsed(Shape("list", inner=Shape("int")), FieldMeta(doc="d", free_form=True), [{"a": 1}, 5, "x"], "t") == (
        [{"a": 1}, 5, None], ["t[2]: must be an integer (got 'x')"])


def test_dump_object_keeps_map_values():
    assert dump_object({"a": [1, {"b": None}], "c": "d"}) == {"a": [1, {"b": None}], "c": "d"}


def test_a_list_of_lists_gives_its_items_neither_its_length_limit_nor_its_keys():
    nested = Shape("list", inner=Shape("list", inner=Shape("any")))
    meta = FieldMeta(doc="d", max_items=1, list_map_keys=("name",))
    rows = [[{"name": "x"}, {"name": "x"}, {"name": "y"}]]
    assert parsed(nested, meta, rows) == (rows, [])


def test_every_free_form_item_error_is_kept_beside_the_length_error():
    meta = FieldMeta(doc="d", free_form=True, k8s="io.k8s.api.core.v1.Toleration", max_items=1)
    raw = [{"operator": "Bogus"}, {"tolerationSeconds": "x"}]
    assert parsed(ANYTHING, meta, raw, "t")[1] == [
        "t: has too many items (got '2 items'); allowed: at most 1. Fix: remove some",
        "t[0].operator: is not allowed (got 'Bogus'); allowed: Equal, Exists, Gt, Lt",
        "t[1].tolerationSeconds: must be an integer (got 'x')"]

"""kubectl's JSONPath templates (jsonpath.py): what `get -o jsonpath=`, `-o custom-columns=`
and `wait --for=jsonpath=` print and match, on the examples kubectl's own documentation
gives and on the edges (missing keys, negative indexes, filters, nested ranges)."""

from __future__ import annotations

import pytest

from disttrain.client.jsonpath import JSONPathError, column_rows, evaluate, expression, parse_columns, render

JOBS = {
    "kind": "List",
    "items": [
        {"metadata": {"name": "alpha", "labels": {"app.kubernetes.io/name": "x", "team": "a"}},
         "status": {"phase": "Running", "progress": {"step": 10, "loss": 2.5},
                    "conditions": [{"type": "Validated", "status": "True"},
                                   {"type": "Running", "status": "True"}]}},
        {"metadata": {"name": "beta", "labels": {"team": "b"}},
         "status": {"phase": "Succeeded", "progress": {"step": 100, "loss": 0.5},
                    "conditions": [{"type": "Succeeded", "status": "True"}]}},
        {"metadata": {"name": "gamma"}, "spec": {"suspend": True}},
    ],
}


@pytest.mark.parametrize("template, printed", [
    ("{.items[*].metadata.name}", "alpha beta gamma"),
    ("{.items[0].metadata.name}", "alpha"),
    ("{.items[-1].metadata.name}", "gamma"),
    ("{.items[0:2].metadata.name}", "alpha beta"),
    ("{.items[::2].metadata.name}", "alpha gamma"),
    ("{.items[0,2].metadata.name}", "alpha gamma"),
    ("{$.items[1]['metadata']['name']}", "beta"),
    ("{..phase}", "Running Succeeded"),
    ("{.items[?(@.status.phase==\"Succeeded\")].metadata.name}", "beta"),
    ("{.items[?(@.status.phase!='Succeeded')].metadata.name}", "alpha"),  # gamma has no phase to compare
    ("{.items[?(@.status.progress.step>=10)].metadata.name}", "alpha beta"),
    ("{.items[?(@.status.progress.loss<1)].metadata.name}", "beta"),
    ("{.items[?(@.spec.suspend)].metadata.name}", "gamma"),
    ("{.items[?(@.spec.suspend==true)].metadata.name}", "gamma"),
    ("{.items[0].metadata.labels.app\\.kubernetes\\.io/name}", "x"),
    ("{.items[0].metadata.labels}", '{"app.kubernetes.io/name":"x","team":"a"}'),
    ("{.items[1].status.progress.loss}", "0.5"),
    ("{.items[2].spec.suspend}", "true"),
    ("{.items[*].status.conditions[?(@.type==\"Running\")].status}", "True"),
    ("{range .items[*]}{.metadata.name}{\"\\t\"}{.status.phase}{\"\\n\"}{end}",
     "alpha\tRunning\nbeta\tSucceeded\ngamma\t\n"),
    ("{range .items[*]}[{range .status.conditions[*]}{.type},{end}]{end}", "[Validated,Running,][Succeeded,][]"),
    ("name: {.items[0].metadata.name}!", "name: alpha!"),
    ("{.items[5].metadata.name}{.nothing.here}", ""),  # missing: nothing, like kubectl's default
    ("{.kind}", "List"),
    ("{'{}'}", "{}"),
])
def test_templates_print_what_kubectl_prints(template, printed):
    assert render(template, JOBS) == printed


@pytest.mark.parametrize("template, complaint", [
    ("{.items", "is not closed"),
    ("{.items[0}", "is not closed"),
    ("{range .items[*]}{.metadata.name}", "has no {end}"),
    ("{end}", "closes no {range}"),
    ("{.items[a]}", "is not an index"),
    ("{.items[1:2:0]}", "step cannot be 0"),
    ("{.items[?(@.x==bare)]}", "compare with a quoted string"),
    ("{}", "empty expression"),
    ("{'open}", "not closed"),
])
def test_bad_templates_name_the_spot_and_the_fix(template, complaint):
    with pytest.raises(JSONPathError, match=None) as caught:
        render(template, JOBS)
    assert complaint in str(caught.value) and repr(template) in str(caught.value)


def test_a_value_compared_across_types_never_matches():
    assert render("{.items[?(@.status.progress.step>'5')].metadata.name}", JOBS) == ""
    assert evaluate(expression("{.items[?(@.spec.suspend==1)]}"), JOBS) == []


def test_custom_columns_align_and_mark_missing_values():
    columns = parse_columns("NAME:.metadata.name,PHASE:{.status.phase},CONDITIONS:.status.conditions[*].type")
    assert column_rows(columns, JOBS["items"]) == [
        "NAME    PHASE       CONDITIONS",
        "alpha   Running     Validated,Running",
        "beta    Succeeded   Succeeded",
        "gamma   <none>      <none>",
    ]
    assert column_rows(columns, JOBS["items"][:1], headers=False) == ["alpha   Running   Validated,Running"]
    assert [h for h, _ in parse_columns("A:.items[0,1].x,B:.y")] == ["A", "B"]  # a comma in [] stays


@pytest.mark.parametrize("spec", ["NAME", "NAME:", ":.metadata.name", ""])
def test_custom_columns_need_header_and_path(spec):
    with pytest.raises(JSONPathError, match="HEADER:PATH"):
        parse_columns(spec)

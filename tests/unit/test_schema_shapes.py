"""Schema shapes that today's API types do not use but the parser accepts: a free-form or
any-valued map, a free-form list, a map of maps. The CRD must say the same as the parser
for them, so that a future field of such a shape is neither pruned by the API server nor
let through by one side only (from mutation survivors in api/schema.py, issue 14)."""

from __future__ import annotations

from dataclasses import dataclass

from disttrain.api.meta import MAP_VALUE_MAX_LENGTH, Shape, spec_field
from disttrain.api.parse import parse_object
from disttrain.api.schema import _shape_schema, schema_for

KEEP_ALL = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
STRINGS = {"type": "object", "additionalProperties": {"type": "string", "maxLength": MAP_VALUE_MAX_LENGTH}}


def test_a_map_of_anything_or_a_free_form_map_keeps_every_field():
    assert _shape_schema(Shape("map", inner=Shape("any")), False) == KEEP_ALL
    assert _shape_schema(Shape("map", inner=Shape("str")), True) == KEEP_ALL
    assert _shape_schema(Shape("map", inner=Shape("str")), False) == STRINGS


def test_a_free_form_list_keeps_every_field_of_its_items():
    items = Shape("list", inner=Shape("map", inner=Shape("str")))
    assert _shape_schema(items, True) == {"type": "array", "items": KEEP_ALL}
    assert _shape_schema(items, False) == {"type": "array", "items": STRINGS}


def test_the_values_of_a_typed_map_are_typed_even_when_they_are_maps():
    nested = Shape("map", inner=Shape("map", inner=Shape("str")))
    assert _shape_schema(nested, False) == {"type": "object", "additionalProperties": STRINGS}


@dataclass
class Extras:
    """extras: a free-form field."""

    extras: dict[str, str] | None = spec_field("extras: anything.", free_form=True)


def test_a_free_form_field_without_a_kubernetes_schema_is_kept_whole_by_both():
    assert schema_for(Extras)["properties"]["extras"] == {**KEEP_ALL, "description": "extras: anything."}
    parsed, errors = parse_object(Extras, {"extras": {"a": 1, "b": {"c": [2]}}}, "spec")
    assert errors == [] and parsed.extras == {"a": 1, "b": {"c": [2]}}

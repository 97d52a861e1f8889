"""kubectl's JSONPath templates (pure), for `get -o jsonpath=...`, `get -o custom-columns=...`
and `wait --for=jsonpath=...`.

The language is the one kubectl documents (kubernetes.io/docs/reference/kubectl/jsonpath):
text with `{...}` actions; in an action `$` (the root) or `@`/nothing (the current object),
`.field`, `['field']`, `..field` (recursive), `*` / `[*]`, `[i]` (negative from the end),
`[start:end:step]`, `[i,j]`, `['a','b']`, filters `[?(@.type=="Ready")]` (==, !=, <, <=,
>, >=, or a bare path for "exists"), `{range EXPR}...{end}`, and quoted literals `{"\\n"}`.
Like kubectl with its default `--allow-missing-template-keys`, a missing field prints
nothing, and a filter keeps no item that lacks the field it compares. Several results of one action are joined by a space; maps and lists print as
compact JSON. Errors are JSONPathError (a ValueError) naming the template and the spot.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from disttrain.client.columns import aligned


class JSONPathError(ValueError):
    pass


# ---- the parsed forms -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Field:
    name: str


@dataclass(frozen=True, slots=True)
class Wildcard:
    pass


@dataclass(frozen=True, slots=True)
class Recursive:
    pass


@dataclass(frozen=True, slots=True)
class Indexes:
    indexes: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Slice:
    start: int | None
    stop: int | None
    step: int | None


@dataclass(frozen=True, slots=True)
class Keys:
    keys: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Filter:
    left: Path
    op: str | None  # None: the left path exists
    right: Any = None


@dataclass(frozen=True, slots=True)
class Path:
    root: bool  # `$`: from the top object, not the current one
    steps: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Range:
    path: Path
    body: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Literal:
    text: str


# ---- parsing --------------------------------------------------------------------------


def parse_template(template: str) -> tuple[Any, ...]:
    """Text, Literal, Path and Range nodes of a template."""
    nodes: list[Any] = []
    stack: list[tuple[Path, list[Any]]] = []
    for kind, text, at in _actions(template):
        target = stack[-1][1] if stack else nodes
        if kind == "text":
            target.append(Literal(text))
            continue
        action = text.strip()
        if action == "end":
            if not stack:
                raise JSONPathError(f"{template!r}: {{end}} at {at} closes no {{range}}")
            path, body = stack.pop()
            (stack[-1][1] if stack else nodes).append(Range(path, tuple(body)))
        elif action.startswith("range ") or action == "range":
            stack.append((parse_path(action[5:].strip(), template), []))
        elif action[:1] in ("'", '"'):
            value, rest = _quoted(action, 0, template)
            if action[rest:].strip():
                raise JSONPathError(f"{template!r}: unexpected {action[rest:].strip()!r} after a quoted text")
            target.append(Literal(value))
        else:
            target.append(parse_path(action, template))
    if stack:
        raise JSONPathError(f"{template!r}: a {{range}} has no {{end}}")
    return tuple(nodes)


def _actions(template: str) -> Iterator[tuple[str, str, int]]:
    """("text", text, at) and ("action", inside the braces, at)."""
    i = 0
    while i < len(template):
        start = template.find("{", i)
        if start < 0:
            yield "text", template[i:], i
            return
        if start > i:
            yield "text", template[i:start], i
        j = _closing(template, start, "{", "}")
        if j < 0:
            raise JSONPathError(f"{template!r}: the {{ at {start} is not closed")
        yield "action", template[start + 1:j], start
        i = j + 1


_NAME = re.compile(r"(?:\\.|[^.\[\]{}\\\s()=!<>&|])+")


def parse_path(text: str, template: str | None = None) -> Path:
    """One action's path: `.status.phase`, `$.items[*].metadata.name`, ..."""
    where = template if template is not None else text
    s = text.strip()
    if not s:
        raise JSONPathError(f"{where!r}: an empty expression")
    i, root = 0, False
    if s[0] in "$@":
        root, i = s[0] == "$", 1
    steps: list[Any] = []
    while i < len(s):
        if s.startswith("..", i):
            steps.append(Recursive())
            i += 2
            if i < len(s) and s[i] == "[":
                continue
            i = _name_step(s, i, steps, where)
        elif s[i] == ".":
            i = _name_step(s, i + 1, steps, where)
        elif s[i] == "[":
            i = _bracket_step(s, i, steps, where)
        elif not steps and i == 0:
            i = _name_step(s, 0, steps, where)  # kubectl also takes `metadata.name`
        else:
            raise JSONPathError(f"{where!r}: unexpected {s[i:]!r}")
    return Path(root, tuple(steps))


def _name_step(s: str, i: int, steps: list[Any], where: str) -> int:
    if i < len(s) and s[i] == "*":
        steps.append(Wildcard())
        return i + 1
    m = _NAME.match(s, i)
    if not m:
        if i >= len(s):  # a trailing dot: `{.}` is the current object
            return i
        raise JSONPathError(f"{where!r}: expected a field name at {s[i:]!r}")
    steps.append(Field(re.sub(r"\\(.)", r"\1", m.group())))
    return m.end()


def _bracket_step(s: str, i: int, steps: list[Any], where: str) -> int:
    close = _closing_bracket(s, i, where)
    inner = s[i + 1:close].strip()
    if inner == "*":
        steps.append(Wildcard())
    elif inner.startswith("?"):
        steps.append(_filter(inner[1:].strip(), where))
    elif inner[:1] in ("'", '"'):
        keys, j = [], 0
        while j < len(inner):
            key, j = _quoted(inner, j, where)
            keys.append(key)
            rest = inner[j:].lstrip()
            if rest.startswith(","):
                j = len(inner) - len(rest) + 1
                while j < len(inner) and inner[j] == " ":
                    j += 1
            elif rest:
                raise JSONPathError(f"{where!r}: unexpected {rest!r} in [{inner}]")
            else:
                break
        steps.append(Keys(tuple(keys)))
    elif ":" in inner:
        parts = inner.split(":")
        if len(parts) > 3:
            raise JSONPathError(f"{where!r}: a slice is [start:end] or [start:end:step], not [{inner}]")
        try:
            values = [int(p) if p.strip() else None for p in parts] + [None] * (3 - len(parts))
        except ValueError:
            raise JSONPathError(f"{where!r}: a slice takes integers, not [{inner}]") from None
        if values[2] == 0:
            raise JSONPathError(f"{where!r}: a slice's step cannot be 0")
        steps.append(Slice(*values))
    else:
        try:
            steps.append(Indexes(tuple(int(p) for p in inner.split(","))))
        except ValueError:
            raise JSONPathError(f"{where!r}: [{inner}] is not an index, a slice, *, a quoted key or a "
                                "filter ?(...)") from None
    return close + 1


def _closing_bracket(s: str, i: int, where: str) -> int:
    j = _closing(s, i, "[", "]")
    if j < 0:
        raise JSONPathError(f"{where!r}: the [ at {s[i:]!r} is not closed")
    return j


def _closing(s: str, i: int, open_: str, close: str) -> int:
    """The index of the `close` that matches the `open_` at s[i] (nested pairs counted,
    quoted text skipped), or -1."""
    depth = 0
    for j in _unquoted(s, i):
        if s[j] == open_:
            depth += 1
        elif s[j] == close:
            depth -= 1
            if depth == 0:
                return j
    return -1


def _unquoted(s: str, start: int = 0) -> Iterator[int]:
    """The indexes of s[start:] outside quoted text ('...' or "...", with backslash
    escapes inside); the quotes themselves are left out too."""
    quote, j = None, start
    while j < len(s):
        c = s[j]
        if quote:
            if c == "\\":
                j += 1
            elif c == quote:
                quote = None
        elif c in ("'", '"'):
            quote = c
        else:
            yield j
        j += 1


_OPERATORS = ("==", "!=", "<=", ">=", "<", ">")


def _filter(text: str, where: str) -> Filter:
    if not (text.startswith("(") and text.endswith(")")):
        raise JSONPathError(f"{where!r}: a filter is ?(@.field OP value), not ?{text}")
    body = text[1:-1].strip()
    for j in _unquoted(body):
        op = next((o for o in _OPERATORS if body.startswith(o, j)), None)
        if op:
            return Filter(parse_path(body[:j], where), op, _value(body[j + len(op):].strip(), where))
    return Filter(parse_path(body, where), None)


def _value(text: str, where: str) -> Any:
    if text[:1] in ("'", '"'):
        value, end = _quoted(text, 0, where)
        if text[end:].strip():
            raise JSONPathError(f"{where!r}: unexpected {text[end:]!r} after {text[:end]}")
        return value
    if text in ("true", "false"):
        return text == "true"
    if text == "null":
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise JSONPathError(f"{where!r}: compare with a quoted string, a number, true, false or null, "
                            f"not {text!r}") from None


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"'}


def _quoted(text: str, i: int, where: str) -> tuple[str, int]:
    """The string quoted at text[i] with kubectl's escapes, and the index after it."""
    quote, out, j = text[i], [], i + 1
    while j < len(text):
        c = text[j]
        if c == "\\" and j + 1 < len(text):
            out.append(_ESCAPES.get(text[j + 1], "\\" + text[j + 1]))
            j += 2
            continue
        if c == quote:
            return "".join(out), j + 1
        out.append(c)
        j += 1
    raise JSONPathError(f"{where!r}: the quote at {text[i:]!r} is not closed")


# ---- evaluation -----------------------------------------------------------------------


def evaluate(path: Path, root: Any, current: Any = None) -> list[Any]:
    """Every value the path reaches (none where a field is missing)."""
    values = [root if path.root or current is None else current]
    for step in path.steps:
        values = [out for value in values for out in _apply(step, value, root)]
    return values


def _apply(step: Any, value: Any, root: Any) -> Iterator[Any]:
    if isinstance(step, Field):
        if isinstance(value, dict) and step.name in value:
            yield value[step.name]
    elif isinstance(step, Keys):
        if isinstance(value, dict):
            yield from (value[k] for k in step.keys if k in value)
    elif isinstance(step, Wildcard):
        yield from _children(value)
    elif isinstance(step, Recursive):
        yield from _descendants(value)
    elif isinstance(step, Indexes):
        if isinstance(value, list):
            yield from (value[i] for i in step.indexes if -len(value) <= i < len(value))
    elif isinstance(step, Slice):
        if isinstance(value, list):
            yield from value[step.start:step.stop:step.step]
    elif isinstance(step, Filter):
        yield from (item for item in _children(value) if _keeps(step, item, root))


def _children(value: Any) -> Iterator[Any]:
    if isinstance(value, dict):
        yield from value.values()
    elif isinstance(value, list):
        yield from value


def _descendants(value: Any) -> Iterator[Any]:
    yield value
    for child in _children(value):
        yield from _descendants(child)


def _keeps(f: Filter, item: Any, root: Any) -> bool:
    found = evaluate(f.left, root, item)
    if f.op is None:
        return bool(found)
    if not found:
        return False
    left, right = found[0], f.right
    if f.op == "==":
        return _same(left, right)
    if f.op == "!=":
        return not _same(left, right)
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (left, right))
    if not numbers and not (isinstance(left, str) and isinstance(right, str)):
        return False  # kubectl compares only numbers with numbers and strings with strings
    return {"<": left < right, "<=": left <= right, ">": left > right, ">=": left >= right}[f.op]


def _same(left: Any, right: Any) -> bool:
    if isinstance(left, bool) or isinstance(right, bool):
        return left is right
    return left == right


# ---- printing -------------------------------------------------------------------------


def text_of(value: Any) -> str:
    """One value as kubectl prints it: strings raw, everything else JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"))


def render(template: str, obj: Any) -> str:
    """The template filled in from `obj` (`-o jsonpath=...`)."""
    return _render(parse_template(template), obj, obj)


def _render(nodes: tuple[Any, ...], root: Any, current: Any) -> str:
    out = []
    for node in nodes:
        if isinstance(node, Literal):
            out.append(node.text)
        elif isinstance(node, Range):
            for item in evaluate(node.path, root, current):
                out.append(_render(node.body, root, item))
        else:
            out.append(" ".join(text_of(v) for v in evaluate(node, root, current)))
    return "".join(out)


def expression(text: str) -> Path:
    """One path, with or without its braces (`{.status.phase}` or `.status.phase`), as
    custom-columns and `wait --for=jsonpath=` take it."""
    s = text.strip()
    if s.startswith("{") != s.endswith("}"):
        raise JSONPathError(f"{text!r}: the braces are not closed")
    if s.startswith("{"):
        s = s[1:-1]
    return parse_path(s, text)


NONE_CELL = "<none>"  # kubectl's cell for a missing value


def parse_columns(spec: str) -> list[tuple[str, Path]]:
    """`NAME:.metadata.name,PHASE:.status.phase` -> [(header, path)]."""
    columns = []
    for part in _split_columns(spec):
        header, sep, path = part.partition(":")
        if not sep or not header or not path.strip():
            raise JSONPathError(f"custom-columns {spec!r}: each column is HEADER:PATH (e.g. "
                                f"NAME:.metadata.name), not {part!r}")
        columns.append((header, expression(path)))
    if not columns:
        raise JSONPathError("custom-columns needs at least one HEADER:PATH")
    return columns


def _split_columns(spec: str) -> list[str]:
    """Split at the commas outside brackets and quotes ([0,1] stays whole)."""
    parts, depth, quote, start = [], 0, None, 0
    for i, c in enumerate(spec):
        if quote:
            if c == quote:
                quote = None
        elif c in ("'", '"'):
            quote = c
        elif c in "[{(":
            depth += 1
        elif c in "]})":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(spec[start:i])
            start = i + 1
    parts.append(spec[start:])
    return [p for p in parts if p.strip()]


def column_rows(columns: list[tuple[str, Path]], objects: list[Any], *, headers: bool = True) -> list[str]:
    """The custom-columns table: a header line, then one aligned line per object."""
    rows = [tuple(h for h, _ in columns)] if headers else []
    for obj in objects:
        rows.append(tuple(",".join(text_of(v) for v in found) if (found := evaluate(p, obj)) else NONE_CELL
                          for _, p in columns))
    return aligned(rows)

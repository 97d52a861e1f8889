"""Reading YAML files of DistributedTraining objects, remembering line numbers so
errors can point at the line to fix; and writing objects as YAML the way kubectl prints
them (`dump_yaml`)."""

from __future__ import annotations

import os
import stat
import sys
from dataclasses import dataclass
from typing import Any

import yaml

from disttrain.api import bounds


class DocumentError(Exception):
    """A file that cannot be read as YAML; str() is one line with file and line."""


@dataclass(slots=True)
class Document:
    path: str
    index: int  # 0-based position in a multi-document file
    line: int  # 1-based line where the document starts
    data: Any
    node: yaml.Node
    # With --template: the template it was resolved against and where each setting came
    # from (cli/template_files.py), for the validation report.
    template: dict[str, Any] | None = None

    def line_of(self, field_path: str) -> int:
        """Best-effort line of `spec.env[0].name` in the file (the document's start if unknown)."""
        node, line = self.node, self.line
        for part in _split(field_path):
            found = _child(node, part)
            if found is None:
                break
            at, node = found
            line = at.start_mark.line + 1
        return line

    @property
    def label(self) -> str:
        return f"{self.path}:{self.line}"


# A file holds a few objects; etcd stores one of up to about 1.5 MiB. PyYAML reads about
# 1 MiB/s, so 1 MiB keeps any file under a second and is far above any real job file.
MAX_FILE_BYTES = 1024 * 1024
# Values a document may expand to through YAML aliases (see api/bounds.MAX_VALUES).
MAX_EXPANDED_NODES = bounds.MAX_VALUES
MAX_INT_DIGITS = 40  # int64 has 19 digits; longer is a typo or an attack


class PlainDumper(yaml.SafeDumper):
    """YAML as kubectl prints it: an object that appears twice is written out twice,
    never as an anchor and an alias (`&id001` / `*id001`)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump_yaml(data: Any, out: Any = None, *, multi: bool = False) -> Any:
    """`data` (a list of documents when multi) as plain YAML, keys in their order, into
    `out`; the text when out is None."""
    dump = yaml.dump_all if multi else yaml.dump
    return dump(data, out, Dumper=PlainDumper, sort_keys=False, width=100)


def read_text(path: str) -> str:
    """A file's text, refusing what is not a regular file or is too large to be a job."""
    if path == "-":
        data = sys.stdin.buffer.read(MAX_FILE_BYTES + 1)
        return _decode(path, data)
    try:
        # O_NONBLOCK: opening a FIFO without a writer must not hang; it is refused below.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise DocumentError(f"{path}: cannot read: {exc.strerror}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
        raise DocumentError(f"{path}: is {kind}; give a YAML or JSON file (or - for stdin)")
    with os.fdopen(fd, "rb") as handle:
        if info.st_size > MAX_FILE_BYTES:
            raise DocumentError(f"{path}: is {info.st_size} bytes; a file of DistributedTrainings "
                                f"is at most {MAX_FILE_BYTES} bytes")
        try:
            data = handle.read(MAX_FILE_BYTES + 1)
        except OSError as exc:
            raise DocumentError(f"{path}: cannot read: {exc.strerror}") from None
    return _decode(path, data)


def _decode(path: str, data: bytes) -> str:
    if len(data) > MAX_FILE_BYTES:
        raise DocumentError(f"{path}: is more than {MAX_FILE_BYTES} bytes; a file of "
                            "DistributedTrainings is smaller")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise DocumentError(f"{path}: is not a UTF-8 text file") from None


def load_documents(path: str, text: str | None = None) -> list[Document]:
    """Every document of a file (or of `text`), with `kind: List` items as documents of
    their own. Raises DocumentError (one line, with file and line) for anything else."""
    if text is None:
        text = read_text(path)
    elif len(text) > MAX_FILE_BYTES:
        raise DocumentError(f"{path}: is more than {MAX_FILE_BYTES} bytes")
    docs: list[Document] = []
    loader = None
    try:
        loader = BoundedLoader(text)  # its reader refuses control characters at once
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            check_expansion(node)
            data = loader.construct_document(node)
            if data is None:
                continue
            for item, item_node in _list_items(data, node):
                docs.append(Document(path, len(docs), item_node.start_mark.line + 1, item, item_node))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else path
        raise DocumentError(f"{where}: not valid YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise DocumentError(f"{path}: not valid YAML: {_one_line(exc)}") from None
    finally:
        if loader is not None:
            loader.dispose()
    return docs


def _list_items(data: Any, node: yaml.Node) -> list[tuple[Any, yaml.Node]]:
    """`kubectl get -o yaml` prints several objects as `kind: List` with `items`."""
    if not (isinstance(data, dict) and isinstance(data.get("kind"), str) and data["kind"].endswith("List")
            and isinstance(data.get("items"), list)):
        return [(data, node)]
    found = _child(node, "items")
    items_node = found[1] if found is not None else None
    nodes = items_node.value if isinstance(items_node, yaml.SequenceNode) else []
    return [(item, nodes[i] if i < len(nodes) else node) for i, item in enumerate(data["items"])]


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())[:300]


class BoundedLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader with the limits a validator facing any input needs:
    nesting depth (its composer recurses), integer length (int() of 5,000 digits
    raises), and duplicate keys (last-wins would silently change a job)."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> yaml.Node:
        self._depth += 1
        try:
            if self._depth > bounds.MAX_DEPTH + 1:
                event = self.peek_event()
                raise yaml.composer.ComposerError(
                    None, None, f"nested more than {bounds.MAX_DEPTH} levels deep; no "
                    "Kubernetes field nests this deep", event.start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, yaml.Node] = {}
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node)
                if isinstance(key, (list, dict)):
                    continue  # reported as unhashable by PyYAML itself
                if key in seen:
                    first = seen[key].start_mark
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {_shown(key)}: first on line {first.line + 1}, "
                        f"again on line {key_node.start_mark.line + 1}; YAML keeps only the last, so "
                        "remove one of them", key_node.start_mark)
                seen[key] = key_node
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: yaml.Node) -> int:
        text = str(node.value)
        if len(text.replace("_", "")) > MAX_INT_DIGITS:
            raise yaml.constructor.ConstructorError(
                None, None, f"an integer of {len(text)} characters; no field takes more than a "
                "64-bit integer", node.start_mark)
        return super().construct_yaml_int(node)


BoundedLoader.add_constructor("tag:yaml.org,2002:int", BoundedLoader.construct_yaml_int)


def check_expansion(root: yaml.Node) -> None:
    """Refuse a document whose aliases would expand to more than MAX_EXPANDED_NODES values
    or nest deeper than the depth bound (the "billion laughs"), or that refers to itself.
    Counts each node once per use, memoized per node, without recursion."""
    size: dict[int, int] = {}
    height: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        children = _children(node)
        if done:
            on_path.discard(key)
            size[key] = 1 + sum(size[id(c)] for c in children)
            height[key] = 1 + max((height[id(c)] for c in children), default=0)
            if size[key] > MAX_EXPANDED_NODES:
                raise yaml.composer.ComposerError(
                    None, None, f"holds more than {MAX_EXPANDED_NODES} values (an alias *name "
                    "counts once per use); no DistributedTraining is this large", node.start_mark)
            if height[key] > bounds.MAX_DEPTH + 1:
                raise yaml.composer.ComposerError(
                    None, None, f"nests more than {bounds.MAX_DEPTH} levels deep through aliases",
                    node.start_mark)
            continue
        if key in size:
            continue
        if key in on_path:
            raise yaml.composer.ComposerError(None, None, "an alias refers to a node that contains "
                                              "it: the value would be infinite", node.start_mark)
        on_path.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in size)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _shown(key: Any) -> str:
    text = repr(key) if not isinstance(key, int) or abs(key) < 10**30 else "an integer"
    return text if len(text) <= 60 else text[:57] + "..."


def is_distributed_training(data: Any) -> bool:
    return isinstance(data, dict) and data.get("kind") == "DistributedTraining"


def describe(data: Any) -> str:
    if isinstance(data, dict):
        return f"a {data.get('kind', 'mapping without kind')} ({data.get('apiVersion', 'no apiVersion')})"
    return f"a {type(data).__name__}"


def _split(path: str) -> list[str | int]:
    parts: list[str | int] = []
    for chunk in path.split("."):
        name, _, rest = chunk.partition("[")
        if name:
            parts.append(name)
        while rest:
            number, _, rest = rest.partition("]")
            if number.isdigit():
                parts.append(int(number))
            rest = rest.lstrip("[")
    return parts


def _child(node: yaml.Node, part: str | int) -> tuple[yaml.Node, yaml.Node] | None:
    """(the node whose line names `part`, its value): a mapping's key (`spce:` is on the
    line of the key, not of the mapping under it), a list's item."""
    if isinstance(node, yaml.MappingNode) and isinstance(part, str):
        for key, value in node.value:
            if getattr(key, "value", None) == part:
                return key, value
    if isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
        return node.value[part], node.value[part]
    return None

"""Reading YAML files of DistributedTraining objects, remembering line numbers so
errors can point at the line to fix."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml


class DocumentError(Exception):
    """A file that cannot be read as YAML; str() is one line with file and line."""


@dataclass(slots=True)
class Document:
    path: str
    index: int  # 0-based position in a multi-document file
    line: int  # 1-based line where the document starts
    data: Any
    node: yaml.Node

    def line_of(self, field_path: str) -> int:
        """Best-effort line of `spec.env[0].name` in the file (the document's start if unknown)."""
        node, line = self.node, self.line
        for part in _split(field_path):
            node = _child(node, part)
            if node is None:
                break
            line = node.start_mark.line + 1
        return line

    @property
    def label(self) -> str:
        return f"{self.path}:{self.line}"


def load_documents(path: str, text: str | None = None) -> list[Document]:
    if text is None:
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except OSError as exc:
            raise DocumentError(f"{path}: cannot read: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise DocumentError(f"{path}: is not a UTF-8 text file") from None
    loader = yaml.SafeLoader(text)
    docs = []
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            data = loader.construct_document(node)
            if data is None:
                continue
            docs.append(Document(path, len(docs), node.start_mark.line + 1, data, node))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else path
        raise DocumentError(f"{where}: not valid YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise DocumentError(f"{path}: not valid YAML: {exc}") from None
    finally:
        loader.dispose()
    return docs


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


def _child(node: yaml.Node, part: str | int) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode) and isinstance(part, str):
        for key, value in node.value:
            if getattr(key, "value", None) == part:
                return value
    if isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
        return node.value[part]
    return None

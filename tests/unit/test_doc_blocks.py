"""tests/doc_blocks.py: how the docs test reads console blocks and their markers (pure)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from .conftest import REPORT

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("doc_blocks", ROOT / "tests" / "doc_blocks.py")
doc_blocks = sys.modules.setdefault("doc_blocks", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(doc_blocks)

DOC = """# Title

<!-- file: job.yaml -->
```yaml
kind: X
```

<!-- check-output -->
```console
$ disttrain validate job.yaml \\
    --strict
job.yaml:1: x: valid
...
$ export A=1
```

<!-- not-run: needs Docker -->
```console
docker build .
```

<!-- not-run `make test`: the whole suite -->

```console
make demo    # trains
make test    # everything
             # (continued comment)
kubectl get dt -w   # watch
```

```python
print("not a console block")
```
"""


def test_blocks_and_markers():
    blocks = doc_blocks.parse_blocks("doc.md", DOC)
    assert [(b.lang, b.line) for b in blocks] == [("yaml", 4), ("console", 9), ("console", 18), ("console", 24),
                                                   ("python", 31)]
    yaml_block, checked, docker, make, _ = blocks
    assert yaml_block.file == "job.yaml" and yaml_block.text == "kind: X\n"
    assert checked.check_output and not checked.not_run
    assert docker.not_run == "needs Docker" and docker.where == "doc.md:18"
    assert make.skip == {"make test": "the whole suite"} and not make.not_run


def test_prompted_commands_join_continuations_and_keep_their_output():
    checked = doc_blocks.parse_blocks("doc.md", DOC)[1]
    commands = doc_blocks.commands(checked)
    assert [c.text for c in commands] == ["disttrain validate job.yaml \\\n    --strict", "export A=1"]
    assert commands[0].output == ["job.yaml:1: x: valid", "..."] and commands[1].output == []


def test_unprompted_lines_are_all_commands_and_skips_match_by_prefix():
    make = doc_blocks.parse_blocks("doc.md", DOC)[3]
    commands = doc_blocks.commands(make)
    assert [c.text.split()[0] for c in commands] == ["make", "make", "#", "kubectl"]
    assert [doc_blocks.skip_reason(make, c) for c in commands] == ["", "the whole suite", "", ""]


@pytest.mark.parametrize(("text", "line"), [
    ("kubectl get dt -w", "timeout 5 kubectl get dt -w || [ $? -eq 124 ]"),
    ("kubectl get dt -w   # watch", "timeout 5 kubectl get dt -w || [ $? -eq 124 ]"),
    ("kubectl get dt -o wide", "kubectl get dt -o wide"),
    ("ls -whatever", "ls -whatever"),
])
def test_watches_are_stopped_and_succeed(text, line):
    assert doc_blocks.shell_line(doc_blocks.Command(text=text, output=[])) == line


def test_shown_output_is_the_whole_output_where_no_line_says_it_leaves_some_out():
    actual = "job.yaml:1: x: valid\n  topology:   1 node\n\nwarning: w\n"
    assert doc_blocks.output_matches(["job.yaml:1: x: valid", "topology: 1 node", "warning: w"], actual) == ""
    assert doc_blocks.output_matches(["job.yaml:1: x: valid", "...", "warning: w"], actual) == ""
    assert doc_blocks.output_matches(["...", "topology: 1 node", "..."], actual) == ""
    assert doc_blocks.output_matches(["...", "warning: w"], actual) == ""
    # a line left out without `...`, lines out of order, a line it never printed, a cut end
    assert doc_blocks.output_matches(["job.yaml:1: x: valid", "warning: w"], actual) == "warning: w"
    assert doc_blocks.output_matches(["topology: 1 node", "job.yaml:1: x: valid"], actual) == "topology: 1 node"
    assert doc_blocks.output_matches(["...", "something else"], actual) == "something else"
    assert doc_blocks.output_matches(["job.yaml:1: x: valid"], actual) == (
        "(nothing after 'job.yaml:1: x: valid', but it printed 'topology: 1 node')")
    assert doc_blocks.output_matches(["...", "topology: 1 node"], actual) == (  # not the end
        "(nothing after 'topology: 1 node', but it printed 'warning: w')")


@pytest.mark.parametrize("marker", ["<!-- not-run -->", "<!-- not-run: -->", "<!-- file: a/b.yaml -->",
                                    "<!-- illustrative -->", "<!-- illustrative: -->",
                                    "<!-- compared-by: tests/unit/test_x.py -->"])
def test_malformed_markers_are_errors_naming_the_block(marker):
    with pytest.raises(ValueError, match=r"doc.md:2:"):
        doc_blocks.parse_blocks("doc.md", f"{marker}\n```console\nls\n```\n")


def test_every_shipped_doc_parses():
    """A marker typo in README.md or docs/ fails here, offline, before the cluster test."""
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in doc_blocks.parse_blocks(path.name, path.read_text()):
            if block.lang == "console" and not block.not_run:
                assert doc_blocks.commands(block), block.where


SHOWN = """<!-- illustrative: its AGE differs each run -->
```console
$ kubectl get dt
NAME   AGE
x      5s
$ kubectl get dt y     # nothing shown: nothing to compare
```

```console
$ disttrain version
disttrain 0.1.0
```

<!-- compared-by: tests/unit/test_cli_samples.py::test_the_status_sample -->
```text
$ kubectl disttrain status x
Phase: Running
```

```text
$ kubectl disttrain logs x
[worker-0] hello
```
"""


def test_shown_output_is_compared_or_marked_illustrative_with_a_reason():
    illustrative, unmarked, pinned, sample = doc_blocks.parse_blocks("doc.md", SHOWN)
    assert illustrative.illustrative == "its AGE differs each run"
    assert pinned.compared_by == "tests/unit/test_cli_samples.py::test_the_status_sample"
    counts = doc_blocks.output_counts([illustrative, unmarked, pinned, sample])
    assert (counts.run, counts.compared, counts.illustrative, counts.samples) == (3, 1, 1, 2)
    assert counts.unmarked == ("doc.md:9: disttrain version", "doc.md:20: $ kubectl disttrain logs x")
    checked = doc_blocks.parse_blocks("doc.md", DOC)
    assert doc_blocks.output_counts(checked).compared == 1 and doc_blocks.output_counts(checked).unmarked == ()


def test_every_shown_output_in_the_shipped_docs_is_compared_or_says_why_not():
    """README.md, docs/*.md and the chart's README: what the docs test (tests/cluster/
    test_docs.py) runs, and how it treats each output the docs show."""
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "charts" / "disttrain" / "README.md"]
    blocks = [b for path in docs for b in doc_blocks.parse_blocks(str(path.relative_to(ROOT)), path.read_text())]
    counts = doc_blocks.output_counts(blocks)
    REPORT.append(f"docs: {counts.run} console commands run, {counts.samples} sample sessions; shown outputs: "
                  f"{counts.compared} compared, {counts.illustrative} marked illustrative")
    assert counts.unmarked == ()
    assert counts.compared > counts.illustrative
    for block in blocks:
        if block.compared_by:  # the test exists and compares this very block (names its first command)
            path, _, name = block.compared_by.partition("::")
            source = (ROOT / path).read_text()
            assert f"def {name}(" in source, block.where
            body = source[source.index(f"def {name}("):].split("\ndef ", 1)[0]
            assert block.text.lstrip().splitlines()[0] in body, f"{block.where}: {name} does not compare it"

import glob
import os

from hypothesis import settings

# `make mutation` runs the covering tests once per mutant: fewer, derandomized examples
# there (hack/mutation.py sets the scale), so a verdict depends on the mutant alone.
HYPOTHESIS_SCALE = float(os.environ.get("DISTTRAIN_HYPOTHESIS_SCALE", "1"))
if HYPOTHESIS_SCALE != 1:
    settings.register_profile("mutation", derandomize=True, database=None)
    settings.load_profile("mutation")


def examples(n: int) -> int:
    """max_examples for a property, scaled down under mutation testing."""
    return max(20, int(n * HYPOTHESIS_SCALE))

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = sorted(glob.glob(os.path.join(ROOT, "manifests", "examples", "*.yaml")))

# Lines the property tests report about what they generated (shown after the run).
REPORT: list[str] = []


def pytest_terminal_summary(terminalreporter):
    for line in REPORT:
        terminalreporter.write_line(line)


# Under mutation testing a mutant's run stops at its first failing test: the quick table
# tests go first, the property tests last.
SLOW_NAMES = ("test_spec_acceptance.py", "test_node_ranges_", "tests/trainer/test_checkpoint.py",
              "test_adversarial_", "test_cli.py")


def pytest_collection_modifyitems(items):
    if HYPOTHESIS_SCALE != 1:
        items.sort(key=lambda item: any(name in item.nodeid for name in SLOW_NAMES))

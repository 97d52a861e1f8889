"""Print the chart's rbac-rules.yaml from manifests/rbac/cluster-role.yaml (one source)."""

import pathlib
import sys

import yaml

root = pathlib.Path(__file__).resolve().parent.parent
role = yaml.safe_load((root / "manifests" / "rbac" / "cluster-role.yaml").read_text())
sys.stdout.write("# Generated from manifests/rbac/cluster-role.yaml by `make crd`; do not edit.\n")
sys.stdout.write(yaml.safe_dump(role["rules"], sort_keys=False))

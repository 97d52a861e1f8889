"""Hypothesis generators of DistributedTraining specs that are valid by construction.

`valid_jobs()` draws a topology first (an elastic range, nodes inside it, GPUs and
processes consistent with each other, every strategy, a mesh sized to the world) and
builds the document around it, together with what the validator must resolve it to
(`Expected`), computed here without calling the code under test. `invalid_jobs()` draws
a valid job and breaks exactly one rule, naming the field the error must point at.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from hypothesis import strategies as st

from disttrain.api import types as t

MAX_TEST_NODES = 6
SAFE_ENV = ["NCCL_DEBUG", "OMP_NUM_THREADS", "HF_HOME", "MY_FLAG", "HOME", "TOKENIZERS_PARALLELISM"]


@dataclass(frozen=True)
class Expected:
    nodes: int
    min_nodes: int
    max_nodes: int
    nproc: int
    strategy: str  # after guardrails
    precision: str
    warnings: frozenset[str]  # reasons that must be among the warnings

    @property
    def world(self) -> int:
        return self.nodes * self.nproc

    @property
    def multi_node(self) -> bool:
        return self.nodes > 1

    @property
    def elastic(self) -> bool:
        return self.min_nodes < self.max_nodes


@st.composite
def topologies(draw, mesh: bool | None = None, need_multi_node: bool = False) -> dict:
    """nodes within an elastic range (or fixed), GPUs and processes, strategy and mesh."""
    if mesh is None:
        mesh = draw(st.booleans()) and draw(st.booleans())  # a quarter of jobs use a mesh
    high = draw(st.integers(2 if need_multi_node else 1, MAX_TEST_NODES))
    low = high if mesh else draw(st.integers(1, high))
    nodes = draw(st.integers(max(low, 2) if need_multi_node else low, high))
    gpus = draw(st.sampled_from([0, 0, 1, 2, 4, 8]))
    choices = ["auto"] + list(range(1, max(gpus, 2) + 1))
    nproc_asked = draw(st.sampled_from(choices))
    if mesh and gpus and nproc_asked != "auto" and nproc_asked > gpus:
        nproc_asked = "auto"  # a mesh cannot have its nprocPerNode clamped
    nproc = (gpus or 1) if nproc_asked == "auto" else (min(nproc_asked, gpus) if gpus else nproc_asked)
    world = nodes * nproc
    spec: dict = {"nodes": nodes, "gpusPerNode": gpus, "nprocPerNode": nproc_asked}
    # minNodes/maxNodes equal to nodes may be written or left out.
    if low != nodes or draw(st.booleans()):
        spec["minNodes"] = low
    if high != nodes or draw(st.booleans()):
        spec["maxNodes"] = high
    strategy = draw(st.sampled_from([None, "auto", "ddp", "fsdp", "fsdp_native"]))
    if mesh:
        strategy = draw(st.sampled_from([None, "auto", "fsdp", "fsdp_native"]))
        tp = draw(st.sampled_from([d for d in range(1, world + 1) if world % d == 0]))
        spec["mesh"] = {"fsdp": world // tp, "tp": tp}
    if strategy is not None:
        spec["strategy"] = strategy
    return {"spec": spec, "low": low, "high": high, "nodes": nodes, "gpus": gpus,
            "asked": nproc_asked, "nproc": nproc, "strategy": strategy, "mesh": mesh}


def expected_for(topo: dict, precision: str | None, claim: bool) -> Expected:
    nodes, low, high, gpus, nproc = topo["nodes"], topo["low"], topo["high"], topo["gpus"], topo["nproc"]
    asked = "fsdp" if topo["strategy"] == "fsdp_native" else (topo["strategy"] or "auto")
    warnings = set()
    if topo["mesh"]:
        strategy = "fsdp"
    elif asked in ("ddp", "fsdp") and high * nproc == 1:
        strategy = "auto"  # one device in total: DDP and FSDP fall back
        warnings.add("DDPSingleDevice" if asked == "ddp" else "FSDPSingleDevice")
    else:
        strategy = asked
    if gpus and topo["asked"] != "auto":
        if topo["asked"] > gpus:
            warnings.add("NprocClamped")
        elif topo["asked"] < gpus:
            warnings.add("IdleGPUs")
    if precision is None:
        resolved_precision = "bf16-mixed" if gpus else "32"
    elif precision == "16-mixed" and not gpus:
        resolved_precision = "32"
        warnings.add("PrecisionFallback")
    else:
        resolved_precision = precision
        if strategy == "fsdp" and gpus and precision != "bf16-mixed":
            warnings.add("FSDPWithoutBF16")
    if not claim:
        warnings.add("EphemeralCheckpoints")
    return Expected(nodes=nodes, min_nodes=low, max_nodes=high, nproc=nproc, strategy=strategy,
                    precision=resolved_precision, warnings=frozenset(warnings))


trainers = st.one_of(
    st.builds(lambda model, steps: {"builtin": {"model": model, "steps": steps}},
              st.sampled_from(["gpt-nano", "gpt-small"]), st.integers(100, 10_000)),
    st.builds(lambda dataset, steps: {"builtin": {"model": "mlp", "dataset": dataset, "steps": steps}},
              st.sampled_from(["synthetic-regression", "synthetic-classification"]), st.integers(100, 10_000)),
    st.builds(lambda script, args: {"command": [script], **({"args": args} if args else {})},
              st.sampled_from(["/workspace/train.py", "--module"]), st.lists(st.sampled_from(["--lr", "1", "x"]), max_size=3)),
)
names = st.sampled_from(["demo", "a", "gpt-run-7", "x" * 51])


@st.composite
def valid_jobs(draw, mesh: bool | None = None, need_multi_node: bool = False) -> tuple[dict, Expected]:
    topo = draw(topologies(mesh, need_multi_node))
    spec = topo["spec"]
    spec["trainer"] = draw(trainers)
    if spec["trainer"].get("command") == ["--module"]:
        spec["trainer"]["command"] = ["--module", "mypkg.train"]
    precision = draw(st.sampled_from([None, "bf16-mixed", "16-mixed", "32"]))
    if precision is not None:
        spec["precision"] = precision
    # a job that can have more than one pod must name a shared claim (CEL and the validator);
    # a single pod may keep its emptyDir, with the EphemeralCheckpoints warning
    many_pods = spec.get("maxNodes", spec.get("nodes", 1)) > 1
    claim = many_pods or draw(st.booleans())
    spec["checkpoint"] = {"intervalSteps": draw(st.integers(0, 100)), "keep": draw(st.integers(1, 5)),
                          "async": draw(st.booleans()), **({"claimName": "shared-ckpt"} if claim else {})}
    env = draw(st.lists(st.sampled_from(SAFE_ENV), unique=True, max_size=3))
    if env:
        spec["env"] = [{"name": n, "value": str(i)} for i, n in enumerate(env)]
    if draw(st.booleans()):
        cpu = draw(st.integers(1, 16))
        spec["resources"] = {"requests": {"cpu": cpu, "memory": "8Gi"}, "limits": {"cpu": cpu + draw(st.integers(0, 4))}}
    if draw(st.booleans()):
        spec["rendezvous"] = {"port": draw(st.integers(20000, 29999)), "joinTimeoutSeconds": draw(st.integers(1, 900))}
    if draw(st.booleans()):
        spec["podTemplate"] = {"metadata": {"labels": {"team": "a"}},
                               "spec": {"containers": [{"name": "trainer", "env": [{"name": "EXTRA", "value": "1"}]}]}}
    if draw(st.booleans()):
        spec["scheduling"] = {"nodeSelector": {"pool": "gpu"},
                              "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}
    spec["image"] = "ghcr.io/disttrain/trainer:0.1.0"
    doc = {"apiVersion": t.API_VERSION, "kind": t.KIND,
           "metadata": {"name": draw(names), "namespace": draw(st.sampled_from(["team-a", "default"]))},
           "spec": spec}
    return doc, expected_for(topo, precision, claim)


# ---- one rule broken at a time ------------------------------------------------------


def _break(doc: dict, kind: str) -> tuple[dict, str] | None:
    """The document with one rule broken and the error path, or None when not applicable."""
    doc = copy.deepcopy(doc)
    spec = doc["spec"]
    nodes = spec["nodes"]
    if kind == "minNodes above nodes":
        spec["minNodes"] = nodes + 1
        spec["maxNodes"] = max(spec.get("maxNodes", nodes), nodes + 1)
        spec.pop("mesh", None)
        return doc, "spec.minNodes"
    if kind == "maxNodes below nodes":
        if nodes == 1:
            return None
        spec["maxNodes"] = nodes - 1
        spec["minNodes"] = min(spec.get("minNodes", nodes), nodes - 1)
        spec.pop("mesh", None)
        return doc, "spec.nodes"
    if kind == "reserved env":
        spec["env"] = [*spec.get("env", []), {"name": "PET_NNODES", "value": "9"}]
        return doc, f"spec.env[{len(spec['env']) - 1}].name"
    if kind == "builtin and command":
        spec["trainer"] = {"builtin": {}, "command": ["t.py"]}
        return doc, "spec.trainer"
    if kind == "metrics on the rendezvous port":
        spec["metrics"] = {"port": spec.get("rendezvous", {}).get("port", 29400)}
        return doc, "spec.metrics.port"
    if kind == "mesh off the world size":
        if "mesh" not in spec:
            return None
        spec["mesh"]["fsdp"] += 1
        return doc, "spec.mesh"
    if kind == "elastic mesh":
        if "mesh" not in spec:
            return None
        spec["maxNodes"] = nodes + 1
        return doc, "spec.mesh"
    if kind == "nprocPerNode 0":
        spec["nprocPerNode"] = 0
        return doc, "spec.nprocPerNode"
    if kind == "negative GPUs":
        spec["gpusPerNode"] = -1
        return doc, "spec.gpusPerNode"
    if kind == "GPUs in resources":
        spec["resources"] = {"limits": {"nvidia.com/gpu": 1}}
        return doc, "spec.resources.limits.nvidia.com/gpu"
    if kind == "unknown field":
        spec["nodez"] = 2
        return doc, "spec.nodez"
    raise AssertionError(kind)


BREAKS = ["minNodes above nodes", "maxNodes below nodes", "reserved env", "builtin and command",
          "metrics on the rendezvous port", "mesh off the world size", "elastic mesh", "nprocPerNode 0",
          "negative GPUs", "GPUs in resources", "unknown field"]


@st.composite
def invalid_jobs(draw, kind: str) -> tuple[dict, str]:
    """(a valid document with `kind` broken, the path its error must name)."""
    doc, _ = draw(valid_jobs(mesh=True if "mesh" in kind else None,
                             need_multi_node=kind == "maxNodes below nodes"))
    return _break(doc, kind)

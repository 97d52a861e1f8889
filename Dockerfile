# syntax=docker/dockerfile:1
# Two images from one file:
#   docker build --target operator -t ghcr.io/disttrain/operator:0.1.0 .   (kopf, no torch)
#   docker build --target trainer  -t ghcr.io/disttrain/trainer:0.1.0 .    (torch, no kopf)
# Both run as uid 1000 with a read-only root filesystem (see manifests/ and the pod contract).
#
# Each image's dependencies are installed in a builder stage (the wheel build, requirement
# files) into a virtualenv at /opt/disttrain made without pip; the runtime stage copies
# only that environment onto the base and installs our wheel into it, so no pip cache,
# build tree or requirement file ships (pip stays only where the base image has it).
#
# Build args (all optional):
#   BASE_IMAGE       an image with Python 3.11, `python` and `pip` on PATH (python:3.11-slim)
#   TORCH_INDEX_URL  an extra index torch may come from (trainer only). Empty: PyPI's build,
#                    which on x86_64 Linux pulls in the CUDA libraries (~5 GB of the image).
#                    CPU only, without them: https://download.pytorch.org/whl/cpu (pip picks
#                    its torch==<pin>+cpu); a CUDA-matched build: https://download.pytorch.org/whl/cu128
#   VERSION          the version in the OCI labels (hack/images.sh passes pyproject's); the
#                    builders add org.opencontainers.image.revision with --label, so a new
#                    revision never invalidates a cached layer
# Build secret (optional): pip-ca, a CA bundle pip trusts (a proxy's), mounted only while a
# RUN step runs and never stored in a layer: --secret id=pip-ca,src=/etc/ssl/certs/ca-certificates.crt
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS base
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/disttrain/bin:$PATH
RUN useradd --uid 1000 --create-home --home-dir /home/disttrain disttrain

# pip, the project metadata and the build live only here.
FROM base AS builder
WORKDIR /src
COPY pyproject.toml constraints.txt ./
# requirements-<extra>.txt: the core dependencies plus one extra, read from pyproject.toml.
RUN python -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; [open(f"requirements-{e}.txt", "w").write("\n".join(p["dependencies"] + p["optional-dependencies"][e]) + "\n") for e in ("operator", "trainer")]' \
    && python -m venv --without-pip /opt/disttrain

# Our package as a wheel, built once for both images (pip fetches the build backend).
FROM builder AS wheel
COPY README.md ./
COPY operator ./operator
COPY trainer ./trainer
RUN --mount=type=secret,id=pip-ca \
    if [ -f /run/secrets/pip-ca ]; then export PIP_CERT=/run/secrets/pip-ca; fi; \
    pip wheel --no-deps --wheel-dir /wheels .

# Each image's dependencies, keyed only on pyproject.toml and constraints.txt: a source
# change reuses them (and the runtime layer copied from them) and rebuilds only our package.
FROM builder AS operator-deps
RUN --mount=type=secret,id=pip-ca \
    if [ -f /run/secrets/pip-ca ]; then export PIP_CERT=/run/secrets/pip-ca; fi; \
    pip --python /opt/disttrain/bin/python install -c constraints.txt -r requirements-operator.txt

FROM builder AS trainer-deps
ARG TORCH_INDEX_URL=
RUN --mount=type=secret,id=pip-ca \
    if [ -f /run/secrets/pip-ca ]; then export PIP_CERT=/run/secrets/pip-ca; fi; \
    pip --python /opt/disttrain/bin/python install ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} \
      -c constraints.txt -r requirements-trainer.txt

# The runtime: the base, the environment, our wheel (~160 KB, the one build leftover in a
# layer), non-root.
FROM base AS runtime
ARG VERSION=0.1.0
LABEL org.opencontainers.image.source="https://github.com/disttrain/disttrain" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.vendor="disttrain"

FROM runtime AS operator
LABEL org.opencontainers.image.title="disttrain-operator" \
      org.opencontainers.image.description="kopf operator for DistributedTraining jobs (no torch)"
COPY --from=operator-deps /opt/disttrain /opt/disttrain
COPY --from=wheel /wheels /tmp/wheels
RUN pip --python /opt/disttrain/bin/python install --no-deps /tmp/wheels/*.whl && rm -rf /tmp/wheels
USER 1000:1000
ENTRYPOINT ["disttrain-operator"]
CMD ["--all-namespaces"]

FROM runtime AS trainer
LABEL org.opencontainers.image.title="disttrain-trainer" \
      org.opencontainers.image.description="torchrun trainer for DistributedTraining jobs (no kopf)"
COPY --from=trainer-deps /opt/disttrain /opt/disttrain
COPY --from=wheel /wheels /tmp/wheels
RUN pip --python /opt/disttrain/bin/python install --no-deps /tmp/wheels/*.whl && rm -rf /tmp/wheels
USER 1000:1000
WORKDIR /workspace
ENV HOME=/tmp
ENTRYPOINT []
CMD ["torchrun", "--module", "disttrain_trainer"]

# Not shipped: what "your own image" means in instrument: auto's real-node test
# (tests/e2e): the trainer image plus Transformers, pinned as the tests pin it. The
# callback's package reaches the pods through instrument: auto's init container.
FROM trainer AS example-transformers
USER 0:0
COPY constraints.txt /tmp/constraints.txt
RUN --mount=type=secret,id=pip-ca \
    if [ -f /run/secrets/pip-ca ]; then export PIP_CERT=/run/secrets/pip-ca; fi; \
    pip --python /opt/disttrain/bin/python install -c /tmp/constraints.txt transformers accelerate \
    && rm /tmp/constraints.txt
USER 1000:1000

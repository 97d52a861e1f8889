# syntax=docker/dockerfile:1
# Two images from one file:
#   docker build --target operator -t ghcr.io/disttrain/operator:0.1.0 .   (kopf, no torch)
#   docker build --target trainer  -t ghcr.io/disttrain/trainer:0.1.0 .    (torch, no kopf)
# Both run as uid 1000 with a read-only root filesystem (see manifests/ and the pod contract).
#
# Build args (all optional):
#   BASE_IMAGE       an image with Python 3.11, `python` and `pip` on PATH (python:3.11-slim)
#   TORCH_INDEX_URL  an extra package index for torch, e.g. a CPU or CUDA-matched wheel index
# Build secret (optional): pip-ca, a CA bundle pip trusts (a proxy's), mounted only while a
# RUN step runs and never stored in a layer: --secret id=pip-ca,src=/etc/ssl/certs/ca-certificates.crt
# Dependencies are installed in their own layer before the sources are copied, so a source
# change rebuilds only the last, small layer (the trainer's torch layer is ~5 GB).
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS base
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN useradd --uid 1000 --create-home --home-dir /home/disttrain disttrain
WORKDIR /src
COPY pyproject.toml constraints.txt ./

# Our package as a wheel, built once for both images (pip fetches the build backend).
FROM base AS wheel
COPY README.md ./
COPY operator ./operator
COPY trainer ./trainer
RUN --mount=type=secret,id=pip-ca \
    if [ -f /run/secrets/pip-ca ]; then export PIP_CERT=/run/secrets/pip-ca; fi; \
    pip wheel --no-deps --wheel-dir /wheels .

FROM base AS operator
RUN --mount=type=secret,id=pip-ca \
    if [ -f /run/secrets/pip-ca ]; then export PIP_CERT=/run/secrets/pip-ca; fi; \
    python -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; print("\n".join(p["dependencies"] + p["optional-dependencies"]["operator"]))' > /tmp/requirements.txt && pip install -c constraints.txt -r /tmp/requirements.txt
COPY --from=wheel /wheels /tmp/wheels
RUN pip install --no-deps /tmp/wheels/*.whl && rm -rf /src /tmp/wheels /tmp/requirements.txt
USER 1000
ENTRYPOINT ["disttrain-operator"]
CMD ["--all-namespaces"]

FROM base AS trainer
ARG TORCH_INDEX_URL=
RUN --mount=type=secret,id=pip-ca \
    if [ -f /run/secrets/pip-ca ]; then export PIP_CERT=/run/secrets/pip-ca; fi; \
    python -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; print("\n".join(p["dependencies"] + p["optional-dependencies"]["trainer"]))' > /tmp/requirements.txt && \
    pip install ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} -c constraints.txt -r /tmp/requirements.txt
COPY --from=wheel /wheels /tmp/wheels
RUN pip install --no-deps /tmp/wheels/*.whl && rm -rf /src /tmp/wheels /tmp/requirements.txt
USER 1000
WORKDIR /workspace
ENV HOME=/tmp
ENTRYPOINT []
CMD ["torchrun", "--module", "disttrain_trainer"]

# Two images from one file:
#   docker build --target operator -t ghcr.io/disttrain/operator:0.1.0 .   (kopf, no torch)
#   docker build --target trainer  -t ghcr.io/disttrain/trainer:0.1.0 .    (torch, no kopf)
# Both run as uid 1000 with a read-only root filesystem (see manifests/ and the pod contract).
FROM python:3.11-slim AS base
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml constraints.txt README.md ./
COPY operator ./operator
COPY trainer ./trainer
RUN useradd --uid 1000 --create-home --home-dir /home/disttrain disttrain

FROM base AS operator
RUN pip install -c constraints.txt ".[operator]" && rm -rf /src
USER 1000
ENTRYPOINT ["disttrain-operator"]
CMD ["--all-namespaces"]

FROM base AS trainer
# torch from PyPI; pick a CUDA-matched wheel for your nodes if needed.
RUN pip install -c constraints.txt ".[trainer]" && rm -rf /src
USER 1000
WORKDIR /workspace
ENV HOME=/tmp
ENTRYPOINT []
CMD ["torchrun", "--module", "disttrain_trainer"]

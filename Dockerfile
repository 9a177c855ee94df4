# syntax=docker/dockerfile:1
# One small image for the operator and the worker runtime:
#   docker run IMAGE operator ...   (the chart's Deployment)
#   docker run IMAGE run ...        (each Worker's pod)
#
# One recipe, two builders: `docker build` reads this file, and so does `make image`
# (hack/image.py), which builds the same stages with no Docker and no registry: the base
# from Debian's packages (debootstrap), then every RUN below as written, in a chroot.
# So keep to FROM, ARG, ENV, WORKDIR, COPY, RUN, LABEL, USER, ENTRYPOINT and CMD.
#
# Three stages: `python` is Debian's own Python (the base both others start from); `build`
# adds pip and installs the wheel with its dependencies into a virtualenv; the final stage
# copies only that virtualenv onto `python`, so no compiler, pip or source tree reaches the
# image. Every dependency installs from a binary wheel (--only-binary), so the build needs
# no compiler either.
#
# The base is pinned to a dated release of Debian's image; pin it by digest in your
# registry's mirror with --build-arg BASE_IMAGE=debian:bookworm-20250520-slim@sha256:<digest>.
ARG BASE_IMAGE=debian:bookworm-20250520-slim

FROM ${BASE_IMAGE} AS python
# Debian's Python 3.11: the interpreter the image runs, and the one the venv is made with.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install --yes --no-install-recommends python3.11 \
 && rm -rf /var/lib/apt/lists/*

FROM python AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install --yes --no-install-recommends python3-pip \
 && rm -rf /var/lib/apt/lists/*
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# The dependencies first, in a step of their own: a change to the code reuses it (here as a
# cached layer, in hack/image.py as its cached base layer). So does the build backend
# (pyproject.toml's build-system), so that building the wheel fetches nothing. The venv has
# no pip of its own: the build stage's pip installs into it (--python).
COPY pyproject.toml ./
RUN python3.11 -m venv --without-pip /opt/agentworkers \
 && python3.11 -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))' >/tmp/requirements.txt \
 && python3.11 -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"]))' >/tmp/build-requirements.txt \
 && python3.11 -m pip --python /opt/agentworkers/bin/python install --only-binary=:all: -r /tmp/requirements.txt \
 && python3.11 -m pip install --target /opt/build-backend --only-binary=:all: -r /tmp/build-requirements.txt
COPY operator ./operator
COPY README.md ./
RUN PYTHONPATH=/opt/build-backend python3.11 -m pip wheel --no-build-isolation --no-deps --wheel-dir /wheels . \
 && python3.11 -m pip --python /opt/agentworkers/bin/python install --only-binary=:all: /wheels/agentworkers-*.whl \
 && /opt/agentworkers/bin/python -m compileall -q /opt/agentworkers/lib \
 && /opt/agentworkers/bin/agentworkers --help >/dev/null

FROM python
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="agentworkers" \
      org.opencontainers.image.description="Kubernetes operator and runtime for AI agent workers" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"
# Mount points made here, so that a read-only root needs none made at run time: the sandbox
# emptyDir, the run's Secrets, the service-account token. The sandbox is open to all, as an
# emptyDir is (a runtime that mounts a tmpfs there keeps the mount point's mode).
RUN mkdir -p /sandbox /var/run/agentworkers /var/run/secrets/kubernetes.io/serviceaccount \
 && chmod 1777 /sandbox
COPY --from=build /opt/agentworkers /opt/agentworkers
ENV PATH=/opt/agentworkers/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
# 65532: the conventional "nonroot" user; the chart and the worker pods run as it too.
USER 65532:65532
WORKDIR /tmp
ENTRYPOINT ["agentworkers"]
CMD ["--help"]

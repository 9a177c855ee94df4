# syntax=docker/dockerfile:1
# One small image for the operator and the worker runtime:
#   docker run IMAGE operator ...   (the chart's Deployment)
#   docker run IMAGE run ...        (each Worker's pod)
#
# Two stages: the first builds the wheel and installs it with its dependencies into a
# virtualenv; the second copies only that virtualenv onto the same slim Python base, so
# no compiler, pip or source tree reaches the image. Every dependency installs from a
# binary wheel (--only-binary), so the build needs no compiler either.
#
# The base is pinned to an exact patch release; pin it by digest in your registry's
# mirror with --build-arg PYTHON_IMAGE=python:3.12.11-slim-bookworm@sha256:<digest>.
ARG PYTHON_IMAGE=python:3.12.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN python -m pip wheel --no-deps --wheel-dir /wheels . \
 && python -m venv --without-pip /opt/agentworkers \
 && python -m pip --python /opt/agentworkers/bin/python install --only-binary=:all: /wheels/agentworkers-*.whl \
 && /opt/agentworkers/bin/python -m compileall -q /opt/agentworkers/lib \
 && /opt/agentworkers/bin/agentworkers --help >/dev/null

FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="agentworkers" \
      org.opencontainers.image.description="Kubernetes operator and runtime for AI agent workers" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"
# The base's own pip is a build tool the image does not need at run time.
RUN python -m pip uninstall --yes --quiet pip \
 && rm -rf /root/.cache
COPY --from=build /opt/agentworkers /opt/agentworkers
ENV PATH=/opt/agentworkers/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
# 65532: the conventional "nonroot" user; the chart and the worker pods run as it too.
USER 65532:65532
WORKDIR /tmp
ENTRYPOINT ["agentworkers"]
CMD ["--help"]

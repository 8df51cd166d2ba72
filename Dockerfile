# Trainer image for vcli: the example TensorFlow trainer in trainer/.
#
# Build:   docker build -t vcli-trainer:latest .
# Run:     docker run --rm vcli-trainer:latest --epochs=3
#
# BASE_IMAGE must provide python3 with the venv module (python:3.11-slim does;
# so does Debian bookworm with python3-venv).  Dependencies go into a venv, so
# the build also works on a PEP 668 "externally managed" Python without pip.
#
# Behind a TLS-intercepting proxy, put the proxy's CA certificate at
# .build-extra/ca.crt (git-ignored) before building; pip then trusts it.  An
# optional .build-extra/pip.conf is used as pip's config file.  Package index:
#   docker build --build-arg PIP_INDEX_URL=https://mirror/simple -t vcli-trainer:latest .
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ARG PIP_TRUSTED_HOST

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_INPUT=1 \
    TF_CPP_MIN_LOG_LEVEL=2

RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

WORKDIR /app

# Optional build-time extras (CA bundle, pip.conf); the directory always exists.
COPY .build-extra/ /tmp/build-extra/
COPY trainer/requirements.txt /app/trainer/requirements.txt
RUN set -e; \
    [ -n "${PIP_INDEX_URL:-}" ] || unset PIP_INDEX_URL; \
    [ -n "${PIP_EXTRA_INDEX_URL:-}" ] || unset PIP_EXTRA_INDEX_URL; \
    [ -n "${PIP_TRUSTED_HOST:-}" ] || unset PIP_TRUSTED_HOST; \
    if [ -f /tmp/build-extra/ca.crt ]; then export PIP_CERT=/tmp/build-extra/ca.crt; fi; \
    if [ -f /tmp/build-extra/pip.conf ]; then export PIP_CONFIG_FILE=/tmp/build-extra/pip.conf; fi; \
    /opt/venv/bin/pip install --no-cache-dir -r /app/trainer/requirements.txt; \
    rm -rf /tmp/build-extra

COPY trainer/ /app/trainer/

ENTRYPOINT ["python", "-m", "trainer.task"]

# syntax=docker/dockerfile:1
# joiner controller image: multi-stage, slim, non-root, and fine with a read-only root filesystem
# (nothing is written at run time: the bytecode is compiled at build time; /tmp is an emptyDir in the chart).
#
# The base is pinned by digest (python:3.11.10-slim-bookworm, linux/amd64 index digest as recorded
# by a Renovate-maintained digest list); the Python dependencies are pinned with hashes in
# deploy/image/requirements.lock (hack/lock-image-deps.sh regenerates it from pyproject.toml).

FROM python:3.11.10-slim-bookworm@sha256:5148c0e4bbb64271bca1d3322360ebf4bfb7564507ae32dd639322e4952a6b16 AS build
WORKDIR /src
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY deploy/image/requirements.lock ./
RUN python -m venv /opt/joiner \
    && /opt/joiner/bin/pip install --no-compile --require-hashes -r requirements.lock
COPY pyproject.toml README.md ./
COPY api ./api
COPY controller ./controller
# bytecode is compiled here, once, by content hash (reproducible: no timestamps; never re-checked
# at run time, the image being read-only): without it every start compiles joiner and its
# dependencies again, about 3 CPU-seconds
RUN /opt/joiner/bin/pip install --no-compile --no-deps . \
    && find /opt/joiner -name '__pycache__' -prune -exec rm -rf {} + \
    && /opt/joiner/bin/python -m compileall -q -j 0 --invalidation-mode unchecked-hash /opt/joiner/lib

FROM python:3.11.10-slim-bookworm@sha256:5148c0e4bbb64271bca1d3322360ebf4bfb7564507ae32dd639322e4952a6b16
LABEL org.opencontainers.image.title="joiner" \
      org.opencontainers.image.description="A node provisioner for GPU clusters" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/joiner/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY --from=build /opt/joiner /opt/joiner
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["joiner", "run"]
CMD ["--provider", "kwok"]

# syntax=docker/dockerfile:1
# One slim, non-root image for every Berth component:
#   berth run      the scheduler and the operators (Deployment berth-controller)
#   berth agent    the node agent (DaemonSet berth-agent; reads the host's /proc and cgroups)
# Build: docker build -t berth:0.1.0 .   (the tag manifests/ uses)
#
# Every dependency (numpy, orjson, pydantic-core, xxhash, aiohttp...) comes as a manylinux
# wheel, so no compiler is needed in either stage.

FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operators ./operators
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
# Only the wheels built above, then the installers go: nothing at run time installs.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index /wheels/*.whl \
    && pip uninstall --no-cache-dir -y pip setuptools wheel
# The root filesystem is read-only in the manifests; bytecode was compiled at install.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# A numeric user, so that runAsNonRoot can verify it.
USER 65532:65532
EXPOSE 10251
ENTRYPOINT ["berth"]
CMD ["run"]

# One slim, non-root image for every Berth component:
#   berth run      the scheduler and the operators (Deployment berth-controller)
#   berth agent    the node agent (DaemonSet berth-agent)
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operators ./operators
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir /wheels/*.whl
USER 65532:65532
ENTRYPOINT ["berth"]
CMD ["run"]

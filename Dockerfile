# syntax=docker/dockerfile:1
# Berth's image for those who build with a Docker engine. `./dev image` (berth image build)
# builds the same contents without one, reproducibly, and is what the project tests; both
# read one definition:
#   image/packages.txt              the Debian bookworm packages (apt here, mmdebstrap there)
#   image/requirements.lock         the wheels, hash-checked (--require-hashes)
#   image/build-requirements.lock   the build backend of Berth's own wheel
# The bytes differ from the archive's (bookworm-slim's base files, apt's state, times).
# Build: docker build --build-arg COMMIT=$(git rev-parse HEAD) -t berth:0.1.0 .

FROM debian:bookworm-slim AS wheels
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY image/ image/
RUN python3 -m venv /builder \
    && /builder/bin/pip install --no-deps --require-hashes -r image/build-requirements.lock
COPY pyproject.toml README.md ./
COPY operators ./operators
ARG COMMIT=unknown
ENV SITE=/install/usr/local/lib/python3.11/dist-packages
# pip runs here, not in the image: the image has no pip. Berth's wheel joins the lock with
# its own hash, so that every wheel is checked. The console scripts go to /usr/local/bin,
# run by the image's Python.
RUN /builder/bin/pip wheel --no-deps --no-build-isolation --wheel-dir /wheels . \
    && wheel=$(echo /wheels/berth-*.whl) \
    && cp image/requirements.lock /tmp/requirements.txt \
    && echo "berth==$(basename "$wheel" | cut -d- -f2) --hash=sha256:$(sha256sum "$wheel" | cut -d' ' -f1)" \
        >> /tmp/requirements.txt \
    && /builder/bin/pip install --no-deps --require-hashes --only-binary=:all: --no-compile \
        --find-links /wheels --target "$SITE" -r /tmp/requirements.txt \
    && mkdir -p /install/usr/local/bin \
    && for script in "$SITE"/bin/*; do \
        sed '1s|.*|#!/usr/bin/python3|' "$script" > "/install/usr/local/bin/${script##*/}"; \
        chmod 755 "/install/usr/local/bin/${script##*/}"; \
    done \
    && rm -r "$SITE/bin" \
    && printf '{"commit": "%s"}\n' "$COMMIT" > "$SITE/berth/build-info.json"

FROM debian:bookworm-slim
COPY image/packages.txt /tmp/packages.txt
RUN apt-get update \
    && sed 's/#.*//' /tmp/packages.txt | xargs apt-get install -y --no-install-recommends \
    && rm -rf /var/lib/apt/lists/* /tmp/packages.txt
COPY --from=wheels /install/ /
# The user by name as well: Python asks the password database for a home when HOME is unset.
RUN echo 'nonroot:x:65532:65532::/home/nonroot:/usr/sbin/nologin' >> /etc/passwd \
    && echo 'nonroot:x:65532:' >> /etc/group \
    && install -d -o 65532 -g 65532 /home/nonroot
# The root filesystem is read-only in the manifests: bytecode is compiled now, as hashes of
# the sources, which nothing checks at run time.
RUN PYTHONHASHSEED=0 python3 -m compileall -q -f --invalidation-mode=unchecked-hash \
    /usr/lib/python3.11 /usr/lib/python3/dist-packages /usr/local/lib/python3.11/dist-packages
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# A numeric user, so that runAsNonRoot can verify it.
USER 65532:65532
EXPOSE 10251
ENTRYPOINT ["berth"]
CMD ["run"]

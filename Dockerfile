# Caravela: one image for the coordinator, workers and the CLI (SPEC §8).
#   docker build -t caravela:dev .        (or: scripts/image, which also tests it)
#   buildah bud --format docker -t caravela:dev .
#   docker run --rm caravela:dev --help
#   docker run -d -p 7400:7400 -p 8080:8080 caravela:dev coordinator
# Build with the docker format (buildah's and podman's default, OCI, drops
# HEALTHCHECK); on Kubernetes the manifests' probes do the same check.
# Stage 1 builds with Debian 12's -dev packages (scripts/install-deps);
# stage 2 carries the binary and only the shared libraries it links
# (tests/deploy/check_deploy.mjs checks that list against `ldd`).

FROM debian:12 AS build
WORKDIR /src
COPY scripts/install-deps scripts/install-deps
COPY web/package.json web/package-lock.json web/
# npm for the dashboard's charting library (web/README.md).
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends npm \
    && scripts/install-deps --build-only && rm -rf /var/lib/apt/lists/*
COPY . .
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release \
    && cmake --build build --target caravela \
    && strip build/cli/caravela

FROM debian:12-slim AS runtime
# The runtime libraries of the build stage's -dev packages; apt brings
# their own dependencies.
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
       ca-certificates \
       libabsl20220623 \
       libcpp-httplib0.11 \
       libcurl4 \
       libfmt9 \
       libgrpc++1.51 \
       libgrpc29 \
       libpq5 \
       libprotobuf32 \
       librdkafka1 \
       librocksdb7.8 \
       libxml2 \
       libsimdjson14 \
       libspdlog1.10 \
       libxxhash0 \
       libyaml-cpp0.7 \
    && rm -rf /var/lib/apt/lists/*
# A fixed uid above the system range (runAsUser 10001 in deploy/k8s/).
RUN groupadd --gid 10001 caravela \
    && useradd --uid 10001 --gid caravela --no-log-init --home-dir /var/lib/caravela \
       --create-home --shell /usr/sbin/nologin caravela
COPY --from=build /src/build/cli/caravela /usr/local/bin/caravela
USER 10001:10001
WORKDIR /var/lib/caravela
# gRPC and HTTP (/healthz, /metrics, the dashboard and /api/v1/) on every
# interface: a coordinator or a worker, each in a container of its own,
# listens on 7400 and 8080 (the binary's defaults, 127.0.0.1 and port 0,
# suit a process on a host). A worker tells others where it is with
# --advertise (CARAVELA_ADVERTISE; default the container's host name:7400).
ENV CARAVELA_LISTEN=0.0.0.0:7400 \
    CARAVELA_HTTP=0.0.0.0:8080 \
    CARAVELA_DATA_DIR=/var/lib/caravela/data
EXPOSE 7400 8080
# The gRPC health service of the coordinator or worker in this container
# (CARAVELA_HEALTH_ADDRESS).
ENV CARAVELA_HEALTH_ADDRESS=127.0.0.1:7400
HEALTHCHECK --interval=10s --timeout=5s --retries=5 \
    CMD caravela health "$CARAVELA_HEALTH_ADDRESS"
ENTRYPOINT ["caravela"]
CMD ["--help"]

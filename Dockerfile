# Caravela: one image for the coordinator, workers and the CLI (SPEC §8).
#   docker build -t caravela:dev .
#   docker run --rm caravela:dev --help
# Stage 1 builds with Debian 12's -dev packages (scripts/install-deps);
# stage 2 carries the binary and only the shared libraries it links
# (tests/deploy/check_dockerfile.py checks that list against `ldd`).

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
RUN groupadd --system --gid 10001 caravela \
    && useradd --system --uid 10001 --gid caravela --home-dir /var/lib/caravela \
       --create-home caravela
COPY --from=build /src/build/cli/caravela /usr/local/bin/caravela
USER 10001:10001
WORKDIR /var/lib/caravela
# gRPC (coordinator 7400, worker 7401) and HTTP (/healthz, /metrics, /api/v1/).
EXPOSE 7400 7401 8080
# The gRPC health service of the coordinator or worker in this container
# (CARAVELA_HEALTH_ADDRESS, default the coordinator's port; a worker's
# container sets 127.0.0.1:7401).
ENV CARAVELA_HEALTH_ADDRESS=127.0.0.1:7400
HEALTHCHECK --interval=10s --timeout=5s --retries=5 \
    CMD caravela health "$CARAVELA_HEALTH_ADDRESS"
ENTRYPOINT ["caravela"]
CMD ["--help"]

# The metrics agent. Build from the repository root:
#   docker build -f deploy/docker/metrics-agent.Dockerfile -t infergate/metrics-agent .
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p infergate-metrics-agent

# Distroless with glibc and CA certificates, no shell; runs as uid 65532.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/metrics-agent /usr/local/bin/metrics-agent
USER 65532:65532
EXPOSE 9903
ENTRYPOINT ["/usr/local/bin/metrics-agent"]
CMD ["run", "--help"]

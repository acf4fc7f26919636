# infergate-epp, the router as an ext_proc endpoint picker. Build from the repository root:
#   docker build -f deploy/docker/epp.Dockerfile -t infergate/epp .
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p infergate-epp

# Distroless with glibc and CA certificates, no shell; runs as uid 65532.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/infergate-epp /usr/local/bin/infergate-epp
USER 65532:65532
EXPOSE 9002 9902
ENTRYPOINT ["/usr/local/bin/infergate-epp"]
CMD ["--help"]

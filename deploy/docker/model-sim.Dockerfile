# The simulated model server (vLLM, SGLang or TensorRT-LLM metrics and OpenAI API), for
# demos and the kind test. Build from the repository root:
#   docker build -f deploy/docker/model-sim.Dockerfile -t infergate/model-sim .
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p infergate-model-sim

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/model-sim /usr/local/bin/model-sim
USER 65532:65532
EXPOSE 8000
ENTRYPOINT ["/usr/local/bin/model-sim"]

# A compat image of the filter for registries and tools that want a Docker image: one
# file, /plugin.wasm, in an empty image (Istio and Envoy Gateway accept this form too).
# Build from a directory holding the built filter as plugin.wasm:
#   cp target/wasm32-wasip1/wasm/infergate_filter.wasm plugin.wasm
#   docker build -f deploy/docker/wasm-plugin.Dockerfile -t registry.example.com/infergate/filter:0.1.0 .
# The two-layer OCI wasm artifact from `infergate-wasm-image` is the preferred form.
FROM scratch
COPY plugin.wasm ./

#!/usr/bin/env bash
# The kind demo: a local Kubernetes cluster with Envoy Gateway, four simulated vLLM
# pods, the metrics agent and the infergate filter; then OpenAI requests, the pod that
# served each, and a check that routing follows the pods' metrics.
#
# Needs docker, kind, kubectl and helm on the PATH, and cargo for the filter. Run from
# the repository root: `make kind-demo`. KEEP_CLUSTER=1 leaves the cluster running.
set -euo pipefail

CLUSTER="${CLUSTER:-infergate}"
EG_VERSION="${EG_VERSION:-v1.9.0}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
WORK="$(mktemp -d)"
WASM="$ROOT/target/wasm32-wasip1/wasm/infergate_filter.wasm"

say() { printf '\n== %s\n' "$*"; }

cleanup() {
  rm -rf "$WORK"
  if [[ "${KEEP_CLUSTER:-0}" != 1 ]]; then
    kind delete cluster --name "$CLUSTER" > /dev/null 2>&1 || true
  fi
}
trap cleanup EXIT

for tool in docker kind kubectl helm cargo; do
  command -v "$tool" > /dev/null || { echo "kind-test/run.sh needs $tool on the PATH" >&2; exit 1; }
done

say "building the filter and the images"
(cd "$ROOT" && make --no-print-directory wasm build)
for image in metrics-agent model-sim; do
  docker build -q -f "$ROOT/deploy/docker/$image.Dockerfile" -t "infergate/$image:0.1.0" "$ROOT"
done

say "creating the kind cluster $CLUSTER"
kind create cluster --name "$CLUSTER" --wait 120s
kind load docker-image --name "$CLUSTER" infergate/metrics-agent:0.1.0 infergate/model-sim:0.1.0

say "installing Envoy Gateway $EG_VERSION (with the Gateway API CRDs and EnvoyPatchPolicy enabled)"
helm install eg oci://docker.io/envoyproxy/gateway-helm --version "$EG_VERSION" \
  --namespace envoy-gateway-system --create-namespace \
  --set config.envoyGateway.extensionApis.enableEnvoyPatchPolicy=true --wait
kubectl apply --server-side -f "$ROOT/deploy/crds/infergate.io_inferencegatewayconfigs.yaml"
kubectl wait --for condition=established --timeout=60s crd/inferencegatewayconfigs.infergate.io

say "deploying the fleet, the module server and the gateway"
kubectl apply -f "$HERE/manifests/00-namespaces.yaml"
kubectl -n infergate-demo create configmap infergate-wasm --from-file=infergate_filter.wasm="$WASM"
token="$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')"
for namespace in infergate-system envoy-gateway-system; do
  kubectl -n "$namespace" create secret generic infergate-control-token --from-literal=token="$token"
done
kubectl apply -f "$HERE/manifests/20-fleet.yaml" -f "$HERE/manifests/30-module-server.yaml"
kubectl -n infergate-demo rollout status deployment/infergate-wasm --timeout=120s
"$ROOT/target/debug/infergate-envoy-config" -c "$HERE/infergate.yaml" --target envoy-gateway \
  --gateway infergate-demo/infergate --wasm "$WASM" \
  --wasm-url http://infergate-wasm.infergate-demo.svc:8080/infergate_filter.wasm -o "$WORK/gateway.yaml"
kubectl apply -f "$WORK/gateway.yaml"
kubectl apply -f "$HERE/manifests/10-gateway.yaml"
kubectl -n infergate-demo rollout status deployment/vllm-llama --timeout=180s
kubectl -n infergate-demo wait --for=condition=Programmed gateway/infergate --timeout=180s

say "deploying the metrics agent"
kubectl apply -f "$HERE/manifests/40-inferencegatewayconfig.yaml"
kubectl apply -f "$ROOT/deploy/kubernetes/metrics-agent.yaml"
kubectl -n infergate-system rollout status deployment/infergate-metrics-agent --timeout=120s

say "sending OpenAI requests"
gateway_service="$(kubectl -n envoy-gateway-system get service \
  -l gateway.envoyproxy.io/owning-gateway-name=infergate -o jsonpath='{.items[0].metadata.name}')"
kubectl -n envoy-gateway-system port-forward "service/$gateway_service" 18080:80 > "$WORK/port-forward.log" 2>&1 &
forward=$!
trap 'kill "$forward" 2> /dev/null || true; cleanup' EXIT
sleep 3

# Prints the status and the pod that served the request: the simulator echoes the
# ranked list the gateway sent it (x-gateway-destination-endpoint), itself first.
chat() {
  curl -sS -o /dev/null -w '%{http_code} %header{x-sim-echo-x-gateway-destination-endpoint}\n' \
    http://127.0.0.1:18080/v1/chat/completions -H 'content-type: application/json' \
    -d "{\"model\":\"$1\",\"messages\":[{\"role\":\"user\",\"content\":\"$2\"}],\"max_tokens\":8}" |
    cut -d, -f1
}
for i in $(seq 1 8); do
  printf 'request %d (meta-llama/Llama-3.1-8B-Instruct): status and pod: %s\n' "$i" \
    "$(chat meta-llama/Llama-3.1-8B-Instruct "hello $i")"
done

say "checking that routing follows the pods' metrics"
mapfile -t pods < <(kubectl -n infergate-demo get pods -l app=vllm-llama -o jsonpath='{range .items[*]}{.status.podIP}{"\n"}{end}')
best="${pods[0]}"
for pod in "${pods[@]}"; do
  if [[ "$pod" == "$best" ]]; then body='{"waiting":0,"running":0,"kv_cache_usage":0.05}'; else body='{"waiting":100,"running":64,"kv_cache_usage":0.95}'; fi
  kubectl -n infergate-demo exec deploy/infergate-wasm -- wget -q -O - --post-data "$body" \
    --header 'content-type: application/json' "http://$pod:8000/admin/metrics" > /dev/null
done
sleep 1
to_best=0
for i in $(seq 1 20); do
  served="$(chat meta-llama/Llama-3.1-8B-Instruct "follow $i" | cut -d' ' -f2)"
  [[ "$served" == "$best:8000" ]] && to_best=$((to_best + 1))
done
echo "$to_best of 20 requests went to $best, the pod whose metrics say it is idle"
if (( to_best < 18 )); then
  echo "FAIL: routing does not follow the metrics" >&2
  exit 1
fi
echo "PASS"

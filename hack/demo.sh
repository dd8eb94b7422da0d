#!/usr/bin/env bash
# The fke demo: a tenant cluster with a GPU node pool that scales from zero
# when GPU pods arrive and back to zero when they leave.
# Run through `make demo` (which builds fke and the upstream binaries first).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$PWD/_output/bin
export PATH="$bin:$PATH"
data=${FKE_HOME:-$HOME/.fke}
kc=$(mktemp -d)/demo.kubeconfig

command -v kubectl >/dev/null || { echo "the demo drives the tenant cluster with kubectl: install it (apt-get install kubectl, or any v1.30+ client)" >&2; exit 1; }
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
k() { kubectl --kubeconfig "$kc" "$@"; }

step "Start the local management plane"
fke --data-dir "$data" up

step "Create cluster 'demo' with a GPU pool (H100 x8, autoscaled 0..4) and a CPU pool"
fke --data-dir "$data" cluster delete demo --wait >/dev/null 2>&1 || true
fke --data-dir "$data" cluster create demo --wait \
  --nodepool name=gpu,type=gpu-h100x8,min=0,max=4,unneeded=20s \
  --nodepool name=cpu,type=cpu-medium,replicas=1
fke --data-dir "$data" kubeconfig demo >"$kc"
fke --data-dir "$data" instancetypes

step "Deploy a training job: 3 pods x 8 GPUs (the pool is at 0 nodes)"
cat >"${kc%/*}/trainer.yaml" <<'YAML'
apiVersion: apps/v1
kind: Deployment
metadata: {name: trainer}
spec:
  replicas: 3
  selector: {matchLabels: {app: trainer}}
  template:
    metadata: {labels: {app: trainer}}
    spec:
      containers:
      - name: trainer
        image: registry.local/trainer:1
        resources: {limits: {nvidia.com/gpu: 8}}
YAML
k apply -f "${kc%/*}/trainer.yaml"

step "The autoscaler adds exactly 3 GPU nodes; the pods start"
start=$SECONDS
until [ "$(k get pods -l app=trainer --no-headers 2>/dev/null | grep -c Running)" = 3 ]; do
  [ $((SECONDS - start)) -lt 120 ] || { echo "pods not running after 120s" >&2; exit 1; }
  sleep 1
done
echo "3 pods Running after $((SECONDS - start))s"
k get nodes -L nvidia.com/gpu.product,fke.dev/nodepool
fke --data-dir "$data" cluster get demo

step "Remove the job: the GPU pool goes back to zero after 20s unneeded"
k delete deployment trainer
start=$SECONDS
until [ "$(k get nodes -l fke.dev/nodepool=gpu --no-headers 2>/dev/null | wc -l)" = 0 ]; do
  [ $((SECONDS - start)) -lt 180 ] || { echo "GPU nodes still there after 180s" >&2; exit 1; }
  sleep 2
done
echo "GPU pool at 0 nodes after $((SECONDS - start))s"
fke --data-dir "$data" nodepool get demo/gpu

if fke doctor >/dev/null 2>&1; then
  step "Real nodes: a local GPU pool at 0 (kubelet + containerd on this machine; simulated H100s without a driver)"
  fke --data-dir "$data" nodepool create demo/h100 --provider local --instance-type gpu-h100x8 \
    --min 0 --max 1 --scale-down-unneeded-time 20s
  # Nodes pull from fke's registry at the host bridge's address.
  img=$(fke --data-dir "$data" image list | awk '/fke\/demo-server/ {print $1; exit}' | sed 's#^127\.0\.0\.1#172.29.0.1#')
  k run infer --image "$img" --restart Never --overrides '{"apiVersion":"v1","spec":{"nodeSelector":{"fke.dev/nodepool":"h100"},
    "containers":[{"name":"infer","image":"'"$img"'","resources":{"limits":{"nvidia.com/gpu":"2"}}}]}}'
  start=$SECONDS
  until [ "$(k get pod infer -o jsonpath='{.status.phase}' 2>/dev/null)" = Running ]; do
    [ $((SECONDS - start)) -lt 180 ] || { echo "the GPU pod is not running after 180s" >&2; k describe pod infer >&2; exit 1; }
    sleep 1
  done
  echo "a local GPU node came up and the pod runs after $((SECONDS - start))s; it was given these GPUs:"
  k get --raw /api/v1/namespaces/default/pods/infer:8080/proxy/ | tr ',' '\n' | grep -A2 '"gpus"' | head -3
  k get nodes -l fke.dev/nodepool=h100 -L nvidia.com/gpu.product,fke.dev/gpu.simulated
  k delete pod infer --wait=false
fi

step "Done. The management plane keeps running:"
echo "  $bin/fke cluster list"
echo "  $bin/fke kubeconfig demo > demo.kubeconfig"
echo "  $bin/fke down          # stop everything"

#!/usr/bin/env bash
# The fke demo: a tenant cluster with a CPU pool and a GPU pool at zero; a
# model-serving app deployed by a Release from a local git repository; GPU
# nodes appearing for it; a load step that the HPA (on GPU utilization)
# and the node autoscaler follow out and back; and, where this host runs
# local nodes, a real node from zero for a 2-GPU pod.
# Run through `make demo` (which builds fke and the upstream binaries first).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$PWD/_output/bin
export PATH="$bin:$PATH"
data=${FKE_HOME:-$HOME/.fke}
kc=$(mktemp -d)/demo.kubeconfig

command -v git >/dev/null || { echo "the demo keeps its app in a local git repository: install git" >&2; exit 1; }
command -v kubectl >/dev/null || { echo "the demo drives the tenant cluster with kubectl: install it (apt-get install kubectl, or any v1.30+ client)" >&2; exit 1; }
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
k() { kubectl --kubeconfig "$kc" "$@"; }

# diagnose prints why the cluster is not where a wait wanted it: the pods
# not Running (node, phase, why not scheduled), the nodes not Ready, the
# HPA and the node pools, recent Warning events other than scheduling
# failures (pods fke re-drove on kwok nodes among them) and the tail of the
# cluster's kwok log without its lease renewals.
diagnose() {
  echo "--- pods not Running (node, phase, scheduling):"
  k get pods -A --field-selector=status.phase!=Running,status.phase!=Succeeded \
    -o custom-columns='NAMESPACE:.metadata.namespace,POD:.metadata.name,NODE:.spec.nodeName,PHASE:.status.phase,SCHEDULED:.status.conditions[?(@.type=="PodScheduled")].message' || true
  echo "--- nodes not Ready:"
  k get nodes -o custom-columns='NODE:.metadata.name,POOL:.metadata.labels.fke\.dev/nodepool,READY:.status.conditions[?(@.type=="Ready")].status,TAINTS:.spec.taints[*].key' |
    awk 'NR == 1 || $3 != "True"' || true
  echo "--- HPA and deployment:"
  k -n model-serving get hpa,deployment || true
  echo "--- node pools:"
  fke --data-dir "$data" nodepool list demo || true
  echo "--- recent Warning events (but FailedScheduling):"
  k get events -A --field-selector=type=Warning,reason!=FailedScheduling --sort-by=.lastTimestamp 2>/dev/null | tail -n 15 || true
  local kwok_log=$data/clusters/default/demo/kwok/kwok.log
  echo "--- the last lines of kwok's log ($kwok_log), lease renewals left out:"
  grep -v '"Syncing lease"' "$kwok_log" 2>/dev/null | tail -n 15 || echo "(none)"
}

# wait_for LIMIT WHAT CMD...: says it waits for WHAT, runs CMD every 2 s
# until it succeeds, and sets waited to the seconds it took; after LIMIT
# seconds it prints why not (diagnose) and exits.
wait_for() {
  local limit=$1 what=$2 start=$SECONDS
  shift 2
  echo "waiting up to ${limit}s for $what"
  until "$@"; do
    if [ $((SECONDS - start)) -ge "$limit" ]; then
      echo "timed out after ${limit}s waiting for $what" >&2
      diagnose >&2
      exit 1
    fi
    sleep 2
  done
  waited=$((SECONDS - start))
}
# available_replicas N: the model-server deployment has at least N available replicas.
available_replicas() {
  [ "$(k -n model-serving get deployment model-server -o jsonpath='{.status.availableReplicas}' 2>/dev/null)" -ge "$1" ] 2>/dev/null
}
# gpu_nodes N: the GPU pool has N nodes.
gpu_nodes() {
  [ "$(k get nodes -l fke.dev/nodepool=gpu --no-headers 2>/dev/null | wc -l)" = "$1" ]
}
# hpa_sees N: the HPA's last sync saw N replicas.
hpa_sees() {
  [ "$(k -n model-serving get hpa model-server -o jsonpath='{.status.currentReplicas}' 2>/dev/null)" = "$1" ]
}
# pod_running NAME: pod NAME (namespace default) is Running.
pod_running() {
  [ "$(k get pod "$1" -o jsonpath='{.status.phase}' 2>/dev/null)" = Running ]
}

step "Start the local management plane"
fke --data-dir "$data" up

step "Create cluster 'demo': a CPU pool and a GPU pool (L4 x1, autoscaled 0..8)"
fke --data-dir "$data" cluster delete demo --wait >/dev/null 2>&1 || true
fke --data-dir "$data" release delete model-serving >/dev/null 2>&1 || true
fke --data-dir "$data" cluster create demo --wait \
  --nodepool name=cpu,type=cpu-medium,replicas=1 \
  --nodepool name=gpu,type=gpu-l4x1,min=0,max=8,unneeded=20s
fke --data-dir "$data" kubeconfig demo >"$kc"

step "A git repository holds the model-serving app (examples/model-serving, and a demo overlay)"
repo=${kc%/*}/model-serving
mkdir -p "$repo/overlays/demo"
cp -r examples/model-serving/base examples/model-serving/overlays/prod "$repo/"
mv "$repo/prod" "$repo/overlays/prod"
# The demo overlay: prod, with an HPA that scales down after 15 s instead of
# the default 5 minutes, so the demo shows the way back.
cat >"$repo/overlays/demo/kustomization.yaml" <<'YAML'
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- ../prod
patches:
- target: {kind: HorizontalPodAutoscaler, name: model-server}
  patch: |-
    - op: add
      path: /spec/behavior
      value: {scaleDown: {stabilizationWindowSeconds: 15}}
YAML
git -C "$repo" init -q -b main
git -C "$repo" add -A
git -C "$repo" -c user.name=demo -c user.email=demo@fke.dev commit -q -m "model-serving v1"
echo "file://$repo at $(git -C "$repo" rev-parse --short HEAD)"

step "A Release deploys it to cluster 'demo' (GPU nodes come up from zero for its 2 replicas)"
fke --data-dir "$data" release create model-serving --repo "file://$repo" --path overlays/demo \
  --stage prod=demo --interval 30s
start=$SECONDS
fke --data-dir "$data" release sync model-serving --wait
wait_for 120 "2 available model-server replicas (GPU nodes from zero, pods Running on them)" available_replicas 2
echo "2 replicas available after $((SECONDS - start))s on $(k get nodes -l fke.dev/nodepool=gpu --no-headers | wc -l) GPU nodes"

step "Load step: 4.5 GPUs of offered load; the HPA on DCGM_FI_DEV_GPU_UTIL scales out, the autoscaler adds GPU nodes"
k -n model-serving annotate deployment model-server fke.dev/simulate-gpu-load=4.5 --overwrite >/dev/null
wait_for 240 "7 available model-server replicas (the HPA scales out, new GPU nodes come up, pods Running on them)" available_replicas 7
replicas=$(k -n model-serving get deployment model-server -o jsonpath='{.status.availableReplicas}')
echo "$replicas replicas available after ${waited}s (HPA syncs every 15 s)"
wait_for 60 "the GPU pool at $replicas nodes, one per replica" gpu_nodes "$replicas"
# The table below is the HPA's view once its next sync has seen the new replicas.
wait_for 60 "the HPA to see $replicas replicas" hpa_sees "$replicas"
k -n model-serving get hpa model-server

step "Load drops to 0.5 GPUs: back to 2 replicas, and the GPU pool back to 2 nodes"
k -n model-serving annotate deployment model-server fke.dev/simulate-gpu-load=0.5 --overwrite >/dev/null
wait_for 240 "the GPU pool back at 2 nodes (the HPA scales in, the autoscaler removes unneeded nodes)" gpu_nodes 2
echo "2 replicas on 2 GPU nodes after ${waited}s (15 s HPA stabilization, 20 s unneeded time)"

if fke doctor >/dev/null 2>&1; then
  step "Real nodes: a local GPU pool at 0 (kubelet + containerd on this machine; simulated H100s without a driver)"
  fke --data-dir "$data" nodepool create demo/h100 --provider local --instance-type gpu-h100x8 \
    --min 0 --max 1 --scale-down-unneeded-time 20s
  # The name fke image list prints is the one pods use.
  img=$(fke --data-dir "$data" image list | awk '/fke\/demo-server/ {print $1; exit}')
  k run infer --image "$img" --restart Never --overrides '{"apiVersion":"v1","spec":{"nodeSelector":{"fke.dev/nodepool":"h100"},
    "containers":[{"name":"infer","image":"'"$img"'","resources":{"limits":{"nvidia.com/gpu":"2"}}}]}}'
  wait_for 180 "pod infer Running on a local GPU node from zero" pod_running infer
  echo "a local GPU node came up and the pod runs after ${waited}s; it was given these GPUs:"
  k get --raw /api/v1/namespaces/default/pods/infer:8080/proxy/ | grep -o 'GPU-[0-9a-f-]*' | sort -u | sed 's/^/  /'
  k get nodes -l fke.dev/nodepool=h100 -L nvidia.com/gpu.product,fke.dev/gpu.simulated
  k delete pod infer --wait=false
fi

step "Summary"
fke --data-dir "$data" cluster list
echo
fke --data-dir "$data" nodepool list demo
echo
fke --data-dir "$data" cluster get demo | grep '^GPUs:' || true
echo
fke --data-dir "$data" release list

step "Done. The management plane keeps running:"
echo "  $bin/fke cluster list"
echo "  $bin/fke kubeconfig demo > demo.kubeconfig"
echo "  $bin/fke release get model-serving"
echo "  $bin/fke down          # stop everything"

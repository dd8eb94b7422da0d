#!/usr/bin/env bash
# Builds the upstream components fke runs into _output/bin:
#   kube-apiserver, kube-controller-manager, kube-scheduler, kubelet (k8s.io/kubernetes),
#   etcd (go.etcd.io/etcd/server/v3), etcdutl (go.etcd.io/etcd/etcdutl/v3), kwok (sigs.k8s.io/kwok), the OCI registry
#   (github.com/distribution/distribution/v3), coredns (github.com/coredns/coredns),
#   metrics-server (sigs.k8s.io/metrics-server) and, for the end-to-end test of Kueue's ProvisioningRequest admission check,
#   kueue (sigs.k8s.io/kueue/cmd/kueue), and fke-kube-plane (cmd/fke-kube-plane: a tenant's etcd, kube-apiserver,
#   kube-controller-manager and kube-scheduler in one process, from upstream's packages). (The Vertical Pod Autoscaler is built from its packages into fke's own
#   fke-vpa: see internal/vpa.)
# The default Kubernetes version's components live in OUTPUT_DIR itself; the older minor that clusters can be created
# on and upgraded from (go.mod in v1.36/) is built into OUTPUT_DIR/v1.36.3.
# Versions are pinned by the go.mod files beside this script. A binary is rebuilt
# only when its pinned version, the Go toolchain or the build flags changed: a stamp
# file next to each binary records what it was built from.
#
# Usage: hack/k8s/build.sh [OUTPUT_DIR] [BINARY...]
# With FKE_BIN_CACHE set to a directory, current binaries are copied from it
# instead of being rebuilt, and new builds are copied into it (CI keeps it
# outside the clone, so a fresh clone does not rebuild).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../../_output/bin}
shift || true
mkdir -p "$out"
out=$(cd "$out" && pwd)

k8s_version=v1.37.2
old_version=v1.36.3

# k8s_ldflags VERSION stamps a Kubernetes component with its version, as
# upstream's release build does.
k8s_ldflags() {
  local v=$1 minor f=""
  minor=$(echo "$v" | cut -d. -f2)
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    f+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    f+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=2026-01-01T00:00:00Z"
  done
  echo "$f -s -w"
}

# name|module dir|package
all=(
  "etcd|etcd|go.etcd.io/etcd/server/v3"
  "etcdutl|etcd|go.etcd.io/etcd/etcdutl/v3"
  "kube-apiserver|.|k8s.io/kubernetes/cmd/kube-apiserver"
  "kube-controller-manager|.|k8s.io/kubernetes/cmd/kube-controller-manager"
  "kube-scheduler|.|k8s.io/kubernetes/cmd/kube-scheduler"
  "kubelet|.|k8s.io/kubernetes/cmd/kubelet"
  "kubectl|.|k8s.io/kubernetes/cmd/kubectl"
  "kube-proxy|.|k8s.io/kubernetes/cmd/kube-proxy"
  "kwok|kwok|sigs.k8s.io/kwok/cmd/kwok"
  "registry|registry|github.com/distribution/distribution/v3/cmd/registry"
  "coredns|coredns|github.com/coredns/coredns"
  "metrics-server|metrics-server|sigs.k8s.io/metrics-server/cmd/metrics-server"
  "kueue|kueue|sigs.k8s.io/kueue/cmd/kueue"
  "fke-kube-plane|../../cmd/fke-kube-plane|fke.dev/fke/cmd/fke-kube-plane"
  "$old_version/kube-apiserver|v1.36|k8s.io/kubernetes/cmd/kube-apiserver"
  "$old_version/kube-controller-manager|v1.36|k8s.io/kubernetes/cmd/kube-controller-manager"
  "$old_version/kube-scheduler|v1.36|k8s.io/kubernetes/cmd/kube-scheduler"
  "$old_version/kubelet|v1.36|k8s.io/kubernetes/cmd/kubelet"
  "$old_version/kube-proxy|v1.36|k8s.io/kubernetes/cmd/kube-proxy"
)

want=("$@")
selected=()
for entry in "${all[@]}"; do
  name=${entry%%|*}
  if [ ${#want[@]} -eq 0 ] || printf '%s\n' "${want[@]}" | grep -qx "$name"; then
    selected+=("$entry")
  fi
done
if [ ${#selected[@]} -eq 0 ]; then
  echo "build.sh: no known binary among: ${want[*]}" >&2
  exit 2
fi

# stamp_of DIR NAME is the stamp file of binary NAME (which may sit in a
# version subdirectory) under DIR.
stamp_of() { echo "$1/$(dirname "$2")/.$(basename "$2").stamp"; }

# save_to_cache NAME STAMP copies a current binary into $FKE_BIN_CACHE.
save_to_cache() {
  [ "$(cat "$(stamp_of "$FKE_BIN_CACHE" "$1")" 2>/dev/null)" = "$2" ] && return 0
  mkdir -p "$(dirname "$FKE_BIN_CACHE/$1")"
  cp "$out/$1" "$FKE_BIN_CACHE/$1.tmp" && mv "$FKE_BIN_CACHE/$1.tmp" "$FKE_BIN_CACHE/$1"
  echo "$2" >"$(stamp_of "$FKE_BIN_CACHE" "$1")"
}


gover=$(go env GOVERSION)
# Cross-builds (GOARCH=arm64 on an amd64 machine, by `make release`) are
# stamped with their architecture and never use the cache, which holds this
# machine's binaries.
cross=""
if [ "$(go env GOARCH)" != "$(go env GOHOSTARCH)" ] || [ "$(go env GOOS)" != "$(go env GOHOSTOS)" ]; then
  cross=" $(go env GOOS)/$(go env GOARCH)"
  unset FKE_BIN_CACHE
fi
total=${#selected[@]}
i=0
start_all=$SECONDS
for entry in "${selected[@]}"; do
  i=$((i + 1))
  IFS='|' read -r name dir pkg <<<"$entry"
  moddir=$here/$dir
  case $dir in
  v1.36) ldflags=$(k8s_ldflags "$old_version") ;;
  *) ldflags=$(k8s_ldflags "$k8s_version") ;;
  esac
  mkdir -p "$(dirname "$out/$name")"
  # The stamp: the module's pinned dependencies, the toolchain and the flags
  # (and for fke-kube-plane, whose code is fke's, its source).
  stamp=$( (cat "$moddir/go.sum"; [ "$name" != fke-kube-plane ] || cat "$moddir"/*.go; echo "$gover $pkg $ldflags$cross") | sha256sum | cut -d' ' -f1)
  cache=${FKE_BIN_CACHE:-}
  if [ -x "$out/$name" ] && [ "$(cat "$(stamp_of "$out" "$name")" 2>/dev/null)" = "$stamp" ]; then
    echo "[$i/$total] $name: up to date"
    [ -z "$cache" ] || save_to_cache "$name" "$stamp"
    continue
  fi
  if [ -n "$cache" ] && [ -x "$cache/$name" ] && [ "$(cat "$(stamp_of "$cache" "$name")" 2>/dev/null)" = "$stamp" ]; then
    cp "$cache/$name" "$out/$name.tmp" && mv "$out/$name.tmp" "$out/$name"
    echo "$stamp" >"$(stamp_of "$out" "$name")"
    echo "[$i/$total] $name: copied from $cache"
    continue
  fi
  echo "[$i/$total] $name: building $pkg (this can take several minutes on an empty cache)"
  t0=$SECONDS
  flags=(-trimpath -ldflags "$ldflags")
  case $name in
  kwok | etcd | etcdutl | registry | coredns | kueue) flags=(-trimpath -ldflags "-s -w") ;;
  # metrics-server reports client-go's version as its own, as its Makefile sets it.
  metrics-server) flags=(-trimpath -ldflags "-s -w -X k8s.io/client-go/pkg/version.gitVersion=v0.8.0") ;;
  esac
  (cd "$moddir" && CGO_ENABLED=0 go build "${flags[@]}" -o "$out/$name.tmp" "$pkg")
  mv "$out/$name.tmp" "$out/$name"
  echo "$stamp" >"$(stamp_of "$out" "$name")"
  [ -z "$cache" ] || save_to_cache "$name" "$stamp"
  echo "[$i/$total] $name: built in $((SECONDS - t0))s"
done
echo "binaries in $out ($((SECONDS - start_all))s)"

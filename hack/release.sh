#!/usr/bin/env bash
# Builds fke and the upstream binaries for each platform, then lays out the
# release (hack/release): `make release VERSION=vX.Y.Z` runs it.
#
# Usage: hack/release.sh VERSION OUT_DIR PLATFORM...   (PLATFORM: linux/amd64, linux/arm64)
# Each platform's binaries are built into OUT_DIR.build/<os>_<arch>; OUT_DIR
# gets only the artifacts. The upstream binaries of this machine's platform
# come from `make binaries` (and $FKE_BIN_CACHE); another platform's are
# cross-built (about as long as `make binaries` on an empty cache).
# fke-gpu-agent links NVML through cgo: cross-building it for arm64 needs
# aarch64-linux-gnu-gcc (Debian/Ubuntu: gcc-aarch64-linux-gnu).
set -euo pipefail
cd "$(dirname "$0")/.."

version=${1:-}
out=${2:-}
shift 2 || true
if [ -z "$version" ] || [ -z "$out" ] || [ $# -eq 0 ]; then
  echo "usage: make release VERSION=vX.Y.Z [RELEASE_PLATFORMS='linux/amd64 linux/arm64']" >&2
  exit 2
fi
if [ -e "$out" ] && [ -n "$(ls -A "$out")" ]; then
  echo "release: $out is not empty: a release is written once (remove it to build $version again)" >&2
  exit 2
fi

host=$(go env GOHOSTOS)/$(go env GOHOSTARCH)
upstream=$(go run ./hack/release --list-upstream)
own=(./cmd/fke ./cmd/fke-manager ./cmd/fke-gpu-metrics ./cmd/fke-vpa ./cmd/fke-pause ./cmd/fke-demo-server)
ldflags="-s -w -X fke.dev/fke/internal/cli.releaseVersion=$version"
args=()
for p in "$@"; do
  os=${p%/*} arch=${p#*/}
  dir=$out.build/${os}_${arch}
  mkdir -p "$dir"
  cc=${CC:-gcc}
  if [ "$p" != "$host" ]; then
    case $arch in
    arm64) cc=aarch64-linux-gnu-gcc ;;
    amd64) cc=x86_64-linux-gnu-gcc ;;
    esac
    command -v "$cc" >/dev/null || { echo "release: fke-gpu-agent for $p needs the C cross-compiler $cc (Debian/Ubuntu: gcc-${cc%-gcc})" >&2; exit 2; }
  fi
  echo "== $p: fke's binaries (static, but fke-gpu-agent, which loads NVML)"
  t0=$SECONDS
  GOOS=$os GOARCH=$arch CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$dir/" "${own[@]}"
  GOOS=$os GOARCH=$arch CGO_ENABLED=1 CC=$cc go build -trimpath -ldflags "$ldflags" -o "$dir/" ./cmd/fke-gpu-agent
  echo "   built in $((SECONDS - t0))s"
  echo "== $p: upstream binaries"
  if [ "$p" = "$host" ]; then
    # This machine's: those of `make binaries`, built there if they are not.
    bin=${FKE_BIN_DIR:-_output/bin}
    # shellcheck disable=SC2086 # one word per binary
    hack/k8s/build.sh "$bin" $upstream
    for b in $upstream; do
      mkdir -p "$(dirname "$dir/$b")"
      cp -f "$bin/$b" "$dir/$b"
    done
  else
    # shellcheck disable=SC2086
    GOOS=$os GOARCH=$arch hack/k8s/build.sh "$dir" $upstream
  fi
  args+=(--platform "$p=$dir")
done
echo "== laying out the release"
go run ./hack/release --version "$version" --out "$out" "${args[@]}"

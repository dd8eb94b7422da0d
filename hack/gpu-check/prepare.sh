#!/usr/bin/env bash
# prepare.sh — builds what hack/gpu-check.sh needs on a lent GPU machine,
# which has no Go toolchain and no package registry, into _output/gpu-check/
# (gzipped: ~65 MB raw, ~22 MB compressed):
#   fke-gpu-agent (cgo: it loads the driver's NVML at run time),
#   bundle (static; builds the OCI bundles of the container check) and
#   runc (static, no seccomp; pinned in hack/gpu-check/runc/go.mod) and
#   cudaprobe (C, loads the CUDA driver at run time; 16 KB).
# Then, on the GPU machine, with _output/gpu-check carried:
#   hack/gpu-check/device.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-_output/gpu-check}
mkdir -p "$out"
out=$(cd "$out" && pwd)
echo "[prepare] fke-gpu-agent"
CGO_ENABLED=1 go build -trimpath -ldflags "-s -w" -o "$out/fke-gpu-agent" ./cmd/fke-gpu-agent 2> >(grep -v -e 'deprecated' -e 'nvml.h' -e 'cgo-gcc-prolog' -e '^ *|' -e '^[0-9]* |' >&2 || true)
echo "[prepare] bundle"
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/bundle" ./hack/gpu-check/bundle
echo "[prepare] runc (static)"
(cd hack/gpu-check/runc && CGO_ENABLED=1 go build -trimpath -tags "netgo osusergo" -ldflags "-s -w -extldflags -static" -o "$out/runc" github.com/opencontainers/runc)
echo "[prepare] cudaprobe"
cc -O2 -o "$out/cudaprobe" hack/gpu-check/cudaprobe/cudaprobe.c -ldl
for f in fke-gpu-agent bundle runc cudaprobe; do
	gzip -9 -f "$out/$f"
done
ls -l "$out"

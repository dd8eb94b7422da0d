#!/usr/bin/env bash
# device.sh — runs hack/gpu-check.sh on a GPU machine with the binaries
# hack/gpu-check/prepare.sh built (carried in _output/gpu-check).
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-_output/gpu-check}
work=$(mktemp -d -t fke-gpu-bin.XXXXXX)
for f in fke-gpu-agent bundle runc; do
	gunzip -c "$bin/$f.gz" >"$work/$f"
	chmod +x "$work/$f"
done
FKE_GPU_AGENT="$work/fke-gpu-agent" FKE_GPU_BUNDLE="$work/bundle" RUNC="$work/runc" GO=false \
	exec hack/gpu-check.sh

#!/usr/bin/env bash
# device.sh — runs hack/gpu-check.sh on a GPU machine with the binaries
# hack/gpu-check/prepare.sh built (carried in _output/gpu-check). The check
# works in a fresh temporary directory; RESULTS (optional) is a directory
# that receives its logs and JSON outputs, whatever the outcome.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-_output/gpu-check}
work=$(mktemp -d -t fke-gpu-bin.XXXXXX)
for f in fke-gpu-agent bundle runc cudaprobe; do
	gunzip -c "$bin/$f.gz" >"$work/$f"
	chmod +x "$work/$f"
done
out=$(mktemp -d -t fke-gpu-check.XXXXXX)
rc=0
OUT="$out" FKE_GPU_AGENT="$work/fke-gpu-agent" FKE_GPU_BUNDLE="$work/bundle" RUNC="$work/runc" FKE_GPU_CUDAPROBE="$work/cudaprobe" GO=false \
	hack/gpu-check.sh || rc=$?
if [[ -n "${RESULTS:-}" ]]; then
	mkdir -p "$RESULTS"
	find "$out" -maxdepth 1 -type f \( -name '*.out' -o -name '*.json' -o -name '*.txt' -o -name '*.log' \) -exec cp {} "$RESULTS/" \;
fi
exit "$rc"

#!/usr/bin/env bash
# gpu-check.sh — check fke-gpu-agent against the real GPUs of this machine.
#
# Builds the agent, prints `info -o json` from the real NVML backend, then
# starts the agent with metrics only (no kubelet, no Kubernetes API), scrapes
# /metrics once and checks the DCGM series are there. Then the container
# check: the agent's answer for an allocation of one GPU (`allocate`) becomes
# an OCI bundle (hack/gpu-check/bundle) run with runc, in which nvidia-smi -L
# must list exactly that GPU, and a CUDA program (hack/gpu-check/cudaprobe)
# must find that GPU alone and fill and read back device memory on it; a
# container given no GPU must see no NVIDIA device and no driver library,
# and the CUDA program must find no driver. As root, it also checks that
# the agent gives the same answer through a bind-mounted host root
# (--driver-root, as in its DaemonSet). Needs an NVIDIA driver; no
# Kubernetes. Takes a few seconds after the build.
#
# Environment: GO (default go), METRICS_PORT (default 19400), OUT (default a temp dir),
# FKE_GPU_AGENT (a prebuilt agent binary: no Go toolchain needed then),
# FKE_GPU_BUNDLE (a prebuilt static bundle tool), RUNC (default runc from PATH;
# the container check is skipped, and says so, without runc or the bundle tool),
# FKE_GPU_CUDAPROBE (a prebuilt hack/gpu-check/cudaprobe; else built with cc
# when there is one, else its part is skipped and says so).
set -euo pipefail

cd "$(dirname "$0")/.."
GO=${GO:-go}
PORT=${METRICS_PORT:-19400}
OUT=${OUT:-$(mktemp -d -t fke-gpu-check.XXXXXX)}
BIN="$OUT/fke-gpu-agent"
AGENT_PID=""
HOSTROOT=""

log() { printf '[gpu-check] %s\n' "$*" >&2; }
fail() { log "FAIL: $*"; exit 1; }

cleanup() {
	if [[ -n "$AGENT_PID" ]] && kill -0 "$AGENT_PID" 2>/dev/null; then
		kill "$AGENT_PID" 2>/dev/null || true
		for _ in $(seq 1 50); do kill -0 "$AGENT_PID" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$AGENT_PID" 2>/dev/null || true
	fi
	if [[ -n "$HOSTROOT" ]]; then
		umount -R "$HOSTROOT" 2>/dev/null || umount -R -l "$HOSTROOT" 2>/dev/null || true
	fi
}
trap cleanup EXIT INT TERM

command -v curl >/dev/null || fail "curl not found"
if command -v nvidia-smi >/dev/null; then
	log "nvidia-smi: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
else
	log "nvidia-smi not found; continuing (the agent only needs libnvidia-ml.so.1)"
fi

if [[ -n "${FKE_GPU_AGENT:-}" ]]; then
	BIN=$FKE_GPU_AGENT
	log "using prebuilt agent $BIN"
else
	command -v "$GO" >/dev/null || fail "go not found (set GO=/path/to/go, or FKE_GPU_AGENT to a prebuilt agent)"
	log "building fke-gpu-agent into $BIN"
	CGO_ENABLED=1 timeout 300 "$GO" build -o "$BIN" ./cmd/fke-gpu-agent || fail "build failed"
fi

log "info -o json (real NVML)"
timeout 60 "$BIN" info --backend real --node-api=false -o json | tee "$OUT/info.json" \
	|| fail "info failed (is the NVIDIA driver installed?)"
grep -q '"uuid": "GPU-' "$OUT/info.json" || fail "info found no GPU"
log "GPUs found: $(grep -c '"uuid": "GPU-' "$OUT/info.json")"

log "starting agent: metrics only on 127.0.0.1:$PORT"
"$BIN" run --backend real --node-api=false --kubelet=false --node-name "$(hostname)" \
	--metrics-address "127.0.0.1:$PORT" --pod-resources-socket "" >"$OUT/agent.log" 2>&1 &
AGENT_PID=$!

ok=""
for _ in $(seq 1 100); do
	if ! kill -0 "$AGENT_PID" 2>/dev/null; then
		cat "$OUT/agent.log" >&2
		fail "agent exited early"
	fi
	if curl -fsS "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1; then ok=1; break; fi
	sleep 0.1
done
[[ -n "$ok" ]] || { cat "$OUT/agent.log" >&2; fail "metrics endpoint not up within 10s"; }

curl -fsS --max-time 20 "http://127.0.0.1:$PORT/metrics" >"$OUT/metrics.txt" || fail "scrape failed"
grep -E '^(DCGM_FI_|fke_gpu_)' "$OUT/metrics.txt"
for m in DCGM_FI_DEV_GPU_UTIL DCGM_FI_DEV_FB_USED DCGM_FI_DEV_FB_FREE DCGM_FI_DEV_GPU_TEMP \
	DCGM_FI_DEV_POWER_USAGE DCGM_FI_DEV_SM_CLOCK DCGM_FI_DEV_MEM_COPY_UTIL DCGM_FI_DEV_XID_ERRORS; do
	grep -q "^$m{" "$OUT/metrics.txt" || fail "metric $m missing"
done
log "agent log:"
cat "$OUT/agent.log" >&2

# --- the host seen from a container ---------------------------------------
# On a node the agent runs in a DaemonSet with the host's / at /host and
# --driver-root /host: it loads NVML through the host's loader cache and
# answers with host paths. As root, mount / the same way (recursively) and
# check that the answer is the one the agent gives from / itself.
if [[ $(id -u) == 0 ]]; then
	HOSTROOT="$OUT/hostroot"
	mkdir -p "$HOSTROOT"
	mount --rbind / "$HOSTROOT" && mount --make-rslave "$HOSTROOT" || fail "bind-mounting / failed"
	log "driver root $HOSTROOT (as in the DaemonSet): info and allocate"
	timeout 60 "$BIN" info --backend real --node-api=false --driver-root "$HOSTROOT" -o json >"$OUT/info-hostroot.json" \
		|| fail "info with --driver-root failed"
	cmp -s "$OUT/info.json" "$OUT/info-hostroot.json" || { diff "$OUT/info.json" "$OUT/info-hostroot.json" >&2; fail "info differs with --driver-root"; }
	timeout 60 "$BIN" allocate --backend real --node-api=false --count 1 >"$OUT/alloc.json" || fail "allocate failed"
	timeout 60 "$BIN" allocate --backend real --node-api=false --driver-root "$HOSTROOT" --count 1 >"$OUT/alloc-hostroot.json" \
		|| fail "allocate with --driver-root failed"
	cmp -s "$OUT/alloc.json" "$OUT/alloc-hostroot.json" || { diff "$OUT/alloc.json" "$OUT/alloc-hostroot.json" >&2; fail "the allocation differs with --driver-root"; }
	log "same GPUs and the same allocation (host paths) through $HOSTROOT"
	# lazily where a submount is still busy (the driver's files, which the
	# metrics agent above has open)
	umount -R "$HOSTROOT" 2>/dev/null || umount -R -l "$HOSTROOT" || fail "unmounting $HOSTROOT failed"
	HOSTROOT=""
else
	log "SKIP driver-root check: needs root (to bind-mount /)"
fi

# --- container check -------------------------------------------------------
RUNC=${RUNC:-$(command -v runc || true)}
BUNDLE=${FKE_GPU_BUNDLE:-}
if [[ -z "$BUNDLE" ]] && command -v "$GO" >/dev/null; then
	BUNDLE="$OUT/bundle"
	CGO_ENABLED=0 timeout 300 "$GO" build -o "$BUNDLE" ./hack/gpu-check/bundle || fail "building the bundle tool failed"
fi
if [[ -z "$RUNC" || -z "$BUNDLE" ]]; then
	log "SKIP container check: no runc (set RUNC) or bundle tool (set FKE_GPU_BUNDLE)"
	log "PASS (outputs in $OUT)"
	exit 0
fi
SMI=$(command -v nvidia-smi || true)
[[ -n "$SMI" ]] || fail "container check needs the host's nvidia-smi"
log "allocate --count 1 (the device plugin's answer, real driver)"
timeout 60 "$BIN" allocate --backend real --node-api=false --count 1 | tee "$OUT/alloc.json" || fail "allocate failed"
want=$(sed -n 's/.*"\(GPU-[0-9a-f-]*\)".*/\1/p' "$OUT/alloc.json" | head -1)
[[ -n "$want" ]] || fail "allocation names no GPU"
grep -q '"container_path": "/dev/nvidia[0-9]' "$OUT/alloc.json" || fail "allocation carries no GPU device node"
grep -q 'libnvidia-ml.so' "$OUT/alloc.json" || fail "allocation carries no libnvidia-ml"

run_container() { # NAME BUNDLE-ARGS... -- COMMAND...
	local name=$1; shift
	rm -rf "$OUT/$name"
	"$BUNDLE" --dir "$OUT/$name" "$@" || fail "bundle $name failed"
	timeout 60 "$RUNC" --root "$OUT/runc-state" run --bundle "$OUT/$name" "fke-gpu-check-$name-$$" >"$OUT/$name.out" 2>&1
	local rc=$?
	cat "$OUT/$name.out"
	"$RUNC" --root "$OUT/runc-state" delete -f "fke-gpu-check-$name-$$" >/dev/null 2>&1 || true
	return $rc
}
deps=$("$BUNDLE" --deps "$SMI") || fail "reading what $SMI needs failed"
interp=$(head -1 <<<"$deps")
log "$SMI needs: $(tr '\n' ' ' <<<"$deps")"
log "container given $want: what it sees"
# shellcheck disable=SC2086 # one path per word
run_container gpu-inspect --allocation "$OUT/alloc.json" --with "$SMI" -- /check inspect /usr/bin/nvidia-smi $deps || fail "inspect failed"
log "container given $want: nvidia-smi -L"
if ! run_container gpu --allocation "$OUT/alloc.json" --with "$SMI" -- /usr/bin/nvidia-smi -L; then
	log "nvidia-smi in the container failed; what the host has:"
	ls -la "$SMI" "$interp" >&2 || true
	log "file system of $OUT: $(stat -f -c %T "$OUT") ($(df -P "$OUT" | tail -1))"
	log "root file system of the bundle:"
	(cd "$OUT/gpu/rootfs" && find . -maxdepth 4 -printf '%y %m %s %p %l\n' | head -80) >&2
	log "the same, run through its loader ($interp):"
	run_container gpu-loader --allocation "$OUT/alloc.json" --with "$SMI" -- "$interp" /usr/bin/nvidia-smi -L || true
	fail "nvidia-smi in the container failed"
fi
listed=$(grep -c '^GPU [0-9]' "$OUT/gpu.out" || true)
[[ "$listed" == 1 ]] || fail "the container lists $listed GPUs, want exactly 1"
grep -q "$want" "$OUT/gpu.out" || fail "the container lists another GPU than $want"
PROBE=${FKE_GPU_CUDAPROBE:-}
if [[ -z "$PROBE" ]] && command -v cc >/dev/null; then
	PROBE="$OUT/cudaprobe"
	cc -O2 -o "$PROBE" hack/gpu-check/cudaprobe/cudaprobe.c -ldl || fail "building cudaprobe failed"
fi
if [[ -n "$PROBE" ]]; then
	log "container given $want: CUDA (cudaprobe)"
	run_container gpu-cuda --allocation "$OUT/alloc.json" --with "$SMI" --add "$PROBE" -- /cudaprobe || fail "CUDA in the container failed"
	grep -q '^devices: 1$' "$OUT/gpu-cuda.out" || fail "CUDA in the container does not see exactly 1 GPU"
	grep -q "^$want .*: memset [0-9]* bytes ok$" "$OUT/gpu-cuda.out" || fail "CUDA in the container did not use $want"
else
	log "SKIP CUDA check: no cudaprobe (set FKE_GPU_CUDAPROBE) and no cc to build it"
fi
log "container given no GPU: what it sees"
run_container none -- /check inspect || fail "inspect failed"
grep -q '"devices": null' "$OUT/none.out" || fail "a container without GPUs sees NVIDIA devices"
grep -q '"nvml": null' "$OUT/none.out" || fail "a container without GPUs sees the driver's NVML library"
if [[ -n "$PROBE" ]]; then
	log "container given no GPU: CUDA (cudaprobe)"
	rc=0
	run_container none-cuda --with "$SMI" --add "$PROBE" -- /cudaprobe || rc=$?
	[[ $rc == 2 ]] || fail "cudaprobe in a container without GPUs exited $rc, want 2 (no CUDA driver)"
fi
log "PASS (outputs in $OUT)"

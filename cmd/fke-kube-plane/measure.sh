#!/usr/bin/env bash
# measure.sh compares the memory and cold start of one idle tenant control
# plane run in several ways, alternating, on the same flags and files:
#   separate  etcd, kube-apiserver, kube-controller-manager, kube-scheduler
#             as four processes (what fke runs today);
#   plane     etcd, and fke-kube-plane running the other three;
#   embedded  fke-kube-plane running all four;
#   nowatchcache  as embedded, with the API server's watch cache off
#             (--watch-cache=false), to see what the cache holds;
#   together  as embedded, starting the controller manager and scheduler
#             beside the API server instead of once it serves;
#   gogc25    as embedded, with GOGC=25 instead of 50;
#   seeded    as embedded, on a copy of the etcd data an embedded run of
#             this round left (what a restart finds: every object the API
#             server's post-start hooks create is there already; list
#             embedded before it).
# It starts fke with a data directory of its own, creates one cluster to
# take its components' flags and files, stops fke, and then starts each
# mode from a fresh etcd data directory with GOGC=50 (fke's setting),
# waits for /readyz, lets it idle for IDLE seconds and reads every
# process's RSS, anonymous memory and PSS. Run it as root on an otherwise
# idle machine, from the repository root, after `make build binaries` and
# building the plane (see main.go):
#
#   cmd/fke-kube-plane/measure.sh PLANE_BINARY [ROUNDS] [IDLE] [MODES]
#
# MODES defaults to "separate plane embedded nowatchcache".
set -euo pipefail

plane=$(realpath "$1")
rounds=${2:-3}
idle=${3:-60}
modes=${4:-separate plane embedded nowatchcache}
bin=$PWD/_output/bin
work=$(mktemp -d /tmp/fke-plane-measure.XXXXXX)
data=$work/data
pids=()

stop_all() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
  done
  pids=()
}
cleanup() {
  stop_all
  "$bin/fke" --data-dir "$data" down --purge >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

"$bin/fke" --data-dir "$data" --bin-dir "$bin" up --one-process-planes=false >"$work/up.log" 2>&1
"$bin/fke" --data-dir "$data" cluster create m --gpu-metrics=false --metrics-server=false --wait >"$work/create.log" 2>&1
dir=$data/clusters/default/m
# Each component's arguments, one per line, from its running process.
for c in etcd kube-apiserver kube-controller-manager kube-scheduler; do
  pid=""
  for p in $(pgrep -f "/$c " || true); do
    [ "$(basename "$(readlink "/proc/$p/exe" 2>/dev/null)")" = "$c" ] || continue
    if tr '\0' '\n' <"/proc/$p/cmdline" | grep -q -- "$dir/"; then pid=$p; fi
  done
  [ -n "$pid" ] || { echo "no $c of cluster m found" >&2; exit 1; }
  tr '\0' '\n' <"/proc/$pid/cmdline" | tail -n +2 >"$work/$c.args"
done
admin=$work/admin.kubeconfig
"$bin/fke" --data-dir "$data" kubeconfig m >"$admin"
"$bin/fke" --data-dir "$data" down >"$work/down.log" 2>&1
etcd_data=$(sed -n 's/^--data-dir=//p' "$work/etcd.args")

# args C prints component C's arguments, one per line.
args() { cat "$work/$1.args"; }

start() { # start NAME ARGS...: a child with GOGC=$gogc, its log in $work
  GOGC=$gogc setsid "$@" >"$work/$(basename "$1").$mode.log" 2>&1 &
  pids+=($!)
}

mem() { # mem: RSS, anonymous and PSS of the started processes, in MB
  local rss=0 anon=0 pss=0
  for p in "${pids[@]}"; do
    rss=$((rss + $(awk '/^VmRSS/{print $2}' "/proc/$p/status")))
    anon=$((anon + $(awk '/^RssAnon/{print $2}' "/proc/$p/status")))
    pss=$((pss + $(awk '/^Pss:/{print $2}' "/proc/$p/smaps_rollup")))
  done
  echo "rss=$((rss / 1024)) anon=$((anon / 1024)) pss=$((pss / 1024))"
}

printf '%-12s %-5s %-8s %s\n' mode round readyz memory_MB
for round in $(seq "$rounds"); do
  for mode in $modes; do
    rm -rf "$etcd_data"
    gogc=50
    if [ "$mode" = seeded ]; then
      [ -d "$work/seed" ] || { echo "seeded: run embedded before it" >&2; exit 2; }
      cp -a "$work/seed" "$etcd_data"
    fi
    t0=$(date +%s.%N)
    case $mode in
      separate)
        start "$bin/etcd" $(args etcd)
        start "$bin/kube-apiserver" $(args kube-apiserver)
        start "$bin/kube-controller-manager" $(args kube-controller-manager)
        start "$bin/kube-scheduler" $(args kube-scheduler) ;;
      plane)
        start "$bin/etcd" $(args etcd)
        start "$plane" kube-apiserver $(args kube-apiserver) -- kube-controller-manager $(args kube-controller-manager) -- kube-scheduler $(args kube-scheduler) ;;
      embedded|seeded|gogc25)
        [ "$mode" != gogc25 ] || gogc=25
        start "$plane" etcd $(args etcd) -- kube-apiserver $(args kube-apiserver) -- kube-controller-manager $(args kube-controller-manager) -- kube-scheduler $(args kube-scheduler) ;;
      nowatchcache)
        start "$plane" etcd $(args etcd) -- kube-apiserver $(args kube-apiserver) --watch-cache=false -- kube-controller-manager $(args kube-controller-manager) -- kube-scheduler $(args kube-scheduler) ;;
      together)
        FKE_PLANE_START=together start "$plane" etcd $(args etcd) -- kube-apiserver $(args kube-apiserver) -- kube-controller-manager $(args kube-controller-manager) -- kube-scheduler $(args kube-scheduler) ;;
      *) echo "unknown mode $mode" >&2; exit 2 ;;
    esac
    ready=""
    for _ in $(seq 600); do
      if "$bin/kubectl" --kubeconfig "$admin" get --raw /readyz >/dev/null 2>&1; then
        ready=$(echo "$(date +%s.%N) - $t0" | bc); break
      fi
      sleep 0.05
    done
    [ -n "$ready" ] || { echo "$mode: no /readyz after 30 s; logs in $work" >&2; trap - EXIT; stop_all; exit 1; }
    sleep "$idle" # the idle interval being measured
    printf '%-12s %-5s %-8.2f %s\n' "$mode" "$round" "$ready" "$(mem)"
    stop_all
    if [ "$mode" = embedded ]; then rm -rf "$work/seed" && cp -a "$etcd_data" "$work/seed"; fi
  done
done

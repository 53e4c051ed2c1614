#!/usr/bin/env bash
# bench-sidecar: how long a sidecar outlives its Job's main container, on the local
# cluster's real kubelet and containerd. Each Job is a main container that exits 0 and a
# `sleep 3600` sidecar (which ignores SIGTERM as PID 1), prepared by the webhook and
# stopped by the agent, both built from this tree and run as processes (as the e2e tests
# run them: test/e2e/sidecar_burst_test.go, TestSidecarBench).
#
# In the burst mode (the default) every main container finishes within the same few
# milliseconds, held at a barrier until all run; in the staggered mode they finish over
# five seconds. Each run prints p50 and p99 of (main container finished -> sidecar
# finished) from containerd's own timestamps, the same of each phase of the agent's
# stops (heard, queued, decided, confirmed, marked, stopped, recorded), and the agent's
# CPU time and peak memory. With --signal process it also prints the stop as the agent
# sees it without the runtime's recording of the exits: the last main's exit heard ->
# the sidecar's process ended, both from the agent's pidfds (docs/design/0078). Each run
# measures each way the agent can send the stop signal (--signal: runtime, the CRI's
# StopContainer; process, the agent to the sidecar's process), one after the other, for
# each kind of sidecar (--sidecar: native, an init container the kubelet restarts if it
# sees it exited while a main runs, so its stop waits for the CRI's record of the main's
# exit; regular, a container with sidecar.sextant.io/native: "false"; floor, no sidecar
# at all but a second container that ends by itself together with its main, once per run
# whatever --signal says: the floor under any stop during such a burst, since no stop can
# end a sidecar sooner than its main ends, docs/design/0084). The summary takes
# the median of the runs' p50s and p99s per Job count, kind and way, and the ratio of
# process's to runtime's. Goals: 20 Jobs, p99 <= 100 ms; 100 Jobs, p99 <= 250 ms; both
# p50 <= 50 ms. Needs root.
#
#   scripts/bench-sidecar.sh [--jobs 20,100] [--runs 3] [--mode burst|staggered]
#                            [--signal runtime,process] [--sidecar native,regular,floor]
#   (make bench-sidecar passes BENCH_SIDECAR_ARGS)
#
# Brings the cluster up if it is not (never down: others may share it); cleans up the
# namespace, webhook configurations and processes it made, also on failure.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
exit_on_help "$@"
cd "$(dirname "$0")/.."

jobs_list=20,100 runs=3 mode=burst signals=runtime,process kinds=native,regular
while [[ $# -gt 0 ]]; do
  case $1 in
    --jobs) jobs_list=${2:-}; shift 2 ;;
    --runs) runs=${2:-}; shift 2 ;;
    --mode) mode=${2:-}; shift 2 ;;
    --signal) signals=${2:-}; shift 2 ;;
    --sidecar) kinds=${2:-}; shift 2 ;;
    *) echo "bench-sidecar: unknown argument '$1' (want --jobs N[,N...], --runs N, --mode burst|staggered, --signal runtime,process, --sidecar native,regular,floor; see --help)" >&2; exit 2 ;;
  esac
done
[[ $signals =~ ^(runtime|process)(,(runtime|process))?$ ]] || { echo "bench-sidecar: --signal '$signals': want runtime, process or both, comma-separated" >&2; exit 2; }
[[ $kinds =~ ^(native|regular|floor)(,(native|regular|floor)){0,2}$ ]] || { echo "bench-sidecar: --sidecar '$kinds': want one or more of native, regular and floor, comma-separated" >&2; exit 2; }
[[ $mode == burst || $kinds == native ]] || { echo "bench-sidecar: --mode staggered runs native sidecars only: add --sidecar native" >&2; exit 2; }
[[ $jobs_list =~ ^[0-9]+(,[0-9]+)*$ ]] || { echo "bench-sidecar: --jobs '$jobs_list': want Job counts from 1 to 100, comma-separated, e.g. 20,100" >&2; exit 2; }
for n in ${jobs_list//,/ }; do
  ((n >= 1 && n <= 100)) || { echo "bench-sidecar: --jobs $n: want 1 to 100 (the kubelet runs at most 110 pods)" >&2; exit 2; }
done
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "bench-sidecar: --runs '$runs': want a positive number, e.g. 3" >&2; exit 2; }
[[ $mode == burst || $mode == staggered ]] || { echo "bench-sidecar: --mode '$mode': want burst or staggered" >&2; exit 2; }

[[ $(id -u) == 0 ]] || die "bench-sidecar needs root (it talks to the node's containerd)"
if ! scripts/cluster.sh status >/dev/null 2>&1; then
  log "bench-sidecar: the local cluster is not up; starting it"
  scripts/cluster.sh up
fi
KUBECONFIG=$(scripts/cluster.sh kubeconfig)
export KUBECONFIG SEXTANT_BENCH_SIDECAR=1 SEXTANT_BENCH_SIDECAR_MODE=$mode
out=$(mktemp)
results=$(mktemp)
trap 'rm -f "$out" "$results"' EXIT
for ((r = 1; r <= runs; r++)); do
  for n in ${jobs_list//,/ }; do
    for k in ${kinds//,/ }; do
      # Every other run in the reverse order, so that neither way always runs on the
      # node the other just left busy.
      order=${signals//,/ }
      ((r % 2 == 0)) && order=$(tr ' ' '\n' <<<"$order" | tac | tr '\n' ' ')
      # The floor has nothing to stop: one run, the agent started as for the first way.
      [[ $k == floor ]] && order=${signals%%,*}
      for s in $order; do
        log "bench-sidecar: run $r of $runs, $n Jobs, $mode, $k sidecars, --sidecar-signal=$s"
        if ! SEXTANT_BENCH_SIDECAR_JOBS=$n SEXTANT_BENCH_SIDECAR_SIGNAL=$s SEXTANT_BENCH_SIDECAR_KIND=$k go test -tags e2e -count=1 -run '^TestSidecarBench$' -timeout 40m ./test/e2e/ -v >"$out" 2>&1; then
          cat "$out" >&2
          die "bench-sidecar: the benchmark failed (run $r, $n Jobs, $k sidecars, --sidecar-signal=$s)"
        fi
        grep '^bench-sidecar:' "$out" | sed "s/^bench-sidecar:/bench-sidecar: run $r:/"
        grep '^bench-sidecar-result:' "$out" >>"$results"
      done
    done
  done
done

# median of the values of key among the result lines of n Jobs with sidecars of kind k
# stopped the way s says; nothing when no line has one
median() { # n k s key
  grep " jobs=$1 .* kind=$2 signal=$3 " "$results" | tr ' ' '\n' | sed -n "s/^$4=//p" | { grep -v '^-$' || true; } | sort -g |
    awk '{v[NR] = $1} END {if (NR == 0) exit; if (NR % 2) print v[(NR + 1) / 2]; else printf "%.1f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}
verdict() { # value goal
  awk -v v="$1" -v g="$2" 'BEGIN {print (v <= g) ? "PASS" : "MISS"}'
}
for n in ${jobs_list//,/ }; do
  for k in ${kinds//,/ }; do
    ways=${signals//,/ }
    [[ $k == floor ]] && ways=${signals%%,*}
    for s in $ways; do
      p50=$(median "$n" "$k" "$s" p50_ms) p99=$(median "$n" "$k" "$s" p99_ms)
      line="bench-sidecar: $n Jobs, $mode, $k sidecars, --sidecar-signal=$s, median of $runs runs: p50 $p50 ms, p99 $p99 ms, agent CPU $(median "$n" "$k" "$s" cpu_ms) ms, peak RSS $(median "$n" "$k" "$s" rss_mib) MiB"
      case $mode:$n in
        burst:20) line+="; goal p99 <= 100 ms: $(verdict "$p99" 100); goal p50 <= 50 ms: $(verdict "$p50" 50)" ;;
        burst:100) line+="; goal p99 <= 250 ms: $(verdict "$p99" 250); goal p50 <= 50 ms: $(verdict "$p50" 50)" ;;
      esac
      echo "$line"
      proc50=$(median "$n" "$k" "$s" proc_p50_ms) proc99=$(median "$n" "$k" "$s" proc_p99_ms)
      [[ -n $proc50 ]] && echo "bench-sidecar: $n Jobs, $mode, $k sidecars, --sidecar-signal=$s, median of $runs runs: main container's exit heard -> sidecar's process ended (the agent's pidfds): p50 $proc50 ms, p99 $proc99 ms"
    done
    if [[ $signals == *,* && $k != floor ]]; then
      awk -v n="$n" -v k="$k" -v a50="$(median "$n" "$k" process p50_ms)" -v b50="$(median "$n" "$k" runtime p50_ms)" \
        -v a99="$(median "$n" "$k" process p99_ms)" -v b99="$(median "$n" "$k" runtime p99_ms)" \
        'BEGIN {printf "bench-sidecar: %s Jobs, %s sidecars: process / runtime: p50 %.2fx, p99 %.2fx\n", n, k, (b50 > 0 ? a50 / b50 : 0), (b99 > 0 ? a99 / b99 : 0)}'
    fi
  done
done

# Shared by the scripts in this folder; sourced, never run.

# Slow, reusable artefacts (Kubernetes binaries, images) live outside the work tree so a
# fresh clone on the same machine reuses them.
SEXTANT_CACHE=${SEXTANT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sextant}

# pinned_version NAME MODULE GO.MOD: prints the version GO.MOD requires of MODULE, for
# the scripts that build a release pinned in a go.mod of their own; dies naming NAME
# and the file when it requires none.
pinned_version() {
  local v
  v=$(awk -v m="$2" '$1 == "require" && $2 == m { print $3; exit } $1 == m { print $2; exit }' "$3")
  [ -n "$v" ] || die "$1: no $2 version in $3"
  echo "$v"
}

log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '%s ERROR %s\n' "$(date +%H:%M:%S)" "$*" >&2; exit 1; }

# print_usage: prints the running script's usage, its header comment: the comment lines
# after the shebang up to the first line that is not a comment, without their "# ".
print_usage() {
  sed -n '1{/^#!/d;}; /^#/!q; s/^# \{0,1\}//; p' "$0"
}

# exit_on_help ARGS...: prints the usage to stdout and exits 0 when an argument is -h or
# --help. Each script calls it with "$@" before it does anything else (and before any cd,
# as print_usage reads "$0").
exit_on_help() {
  local a
  for a in "$@"; do
    case $a in -h | --help) print_usage; exit 0 ;; esac
  done
}

# usage_error MESSAGE: prints the usage and MESSAGE to stderr and exits 2, for a call the
# script does not understand (no or an unknown subcommand).
usage_error() {
  print_usage >&2
  printf '%s ERROR %s\n' "$(date +%H:%M:%S)" "$*" >&2
  exit 2
}

# wait_listening NS PORT: waits until a TCP socket listens on PORT in network namespace
# NS; a server started moments ago may not have bound yet on a loaded machine.
wait_listening() {
  local _
  for _ in $(seq 200); do
    [ -n "$(ip netns exec "$1" ss -Hltn "sport = :$2" 2>/dev/null)" ] && return 0
    sleep 0.05
  done
  die "nothing listens on TCP port $2 in network namespace $1 after 10s"
}

# prog_stat NAME-REGEX FIELD: FIELD of bpftool's JSON (run_time_ns, run_cnt, id) summed
# over the loaded BPF programs whose name matches; 0 if none does.
prog_stat() {
  bpftool prog show --json | jq --arg n "$1" --arg f "$2" '[.[] | select(.name | test("^(" + $n + ")$")) | .[$f] // 0] | add // 0'
}

# median: the median of the numbers on stdin, one a line.
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR+1)/2]; else print (v[NR/2] + v[NR/2+1]) / 2 }'; }

# demo_agent_kubeconfig STATE ADMIN_KUBECONFIG NODE: writes and prints a kubeconfig that
# authenticates as the chart's sextant-agent ServiceAccount with a token bound to NODE,
# so a demo agent run as a process has exactly the chart's RBAC and, by the token's node
# claim, writes for that node only (the chart's agent-policy.yaml).
demo_agent_kubeconfig() {
  local state=$1 admin=$2 node=$3 out=$1/pki/demo-agent-$3.kubeconfig token
  local k="$state/kube-bin/kubectl --kubeconfig $out"
  token=$("$state/kube-bin/kubectl" --kubeconfig "$admin" -n sextant-system create token sextant-agent --duration 24h \
    --bound-object-kind Node --bound-object-name "$node") || return 1
  cp "$admin" "$out"
  $k config set-credentials demo-agent --token "$token" >/dev/null
  $k config set-context "$($k config current-context)" --user demo-agent >/dev/null
  echo "$out"
}

# chart_agent_window STATE ADMIN_KUBECONFIG: prints the deployed chart's agent window
# (agent.window, a Go duration such as 60s). The chart makes it the ranker's minWindow
# too, so an agent the demo runs must measure over at least that long: the ranker takes
# reports over a shorter window as partial and places no bandwidth pod by them.
chart_agent_window() {
  "$1/kube-bin/kubectl" --kubeconfig "$2" -n sextant-system get daemonset sextant-agent -o json |
    jq -er '[.spec.template.spec.containers[].args[]? | select(startswith("--window=")) | ltrimstr("--window=")][0] // "60s"'
}

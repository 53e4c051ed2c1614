# Shared by the scripts in this folder; sourced, never run.

# Slow, reusable artefacts (Kubernetes binaries, images) live outside the work tree so a
# fresh clone on the same machine reuses them.
SEXTANT_CACHE=${SEXTANT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sextant}

log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '%s ERROR %s\n' "$(date +%H:%M:%S)" "$*" >&2; exit 1; }

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

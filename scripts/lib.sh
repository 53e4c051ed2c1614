# Shared by the scripts in this folder; sourced, never run.

# Slow, reusable artefacts (Kubernetes binaries, images) live outside the work tree so a
# fresh clone on the same machine reuses them.
SEXTANT_CACHE=${SEXTANT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sextant}

log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '%s ERROR %s\n' "$(date +%H:%M:%S)" "$*" >&2; exit 1; }

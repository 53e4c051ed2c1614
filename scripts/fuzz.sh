#!/usr/bin/env bash
# Runs every Go fuzz target in the module for FUZZTIME each (default 30s), one after the
# other: go test -fuzz takes one target of one package per run. New crashers land in the
# package's testdata/fuzz/<Target>/, where `make test` replays them as seeds from then on.
#
#   FUZZTIME=1m scripts/fuzz.sh (make fuzz FUZZTIME=1m; no arguments)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$here/lib.sh"
exit_on_help "$@"
cd "$repo"

fuzztime=${FUZZTIME:-30s}
failed=()
while IFS=: read -r file target; do
  pkg=./$(dirname "$file")
  log "fuzz: $pkg $target for $fuzztime"
  if ! go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg"; then
    failed+=("$pkg $target")
  fi
done < <(git grep -o -E '^func Fuzz[A-Za-z0-9_]+\(f \*testing\.F\)' -- '*_test.go' | sed -E 's/:func (Fuzz[A-Za-z0-9_]+).*/:\1/' | sort)
if [ "${#failed[@]}" -gt 0 ]; then
  die "fuzz: failing targets: ${failed[*]}"
fi
log "fuzz: every target ran $fuzztime without a failure"

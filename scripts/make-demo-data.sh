#!/usr/bin/env bash
# Remake data/cmudict-sample/, the CMUdict sample `make demo` trains on, from the npm registry:
#
#   scripts/make-demo-data.sh [--from DIR]
#
# Runs `scripts/get-data.sh cmudict` into a temporary folder (or reads an existing output of it
# with --from DIR) and draws the sample with scripts/data/cmudict_sample.py. Deterministic: the
# same dictionary version gives the same bytes, so `git diff data/` after a rerun shows nothing.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
from=
case ${1:-} in
  --from) [ $# -eq 2 ] || { echo "usage: $0 [--from DIR]" >&2; exit 2; }; from=$2 ;;
  "") ;;
  -h|--help) sed -n '2,8s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;;
  *) echo "usage: $0 [--from DIR]" >&2; exit 2 ;;
esac

if [ -z "$from" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  "$repo/scripts/get-data.sh" --out "$work" cmudict
  from=$work
fi
/usr/bin/python3 "$repo/scripts/data/cmudict_sample.py" --source "$from" --out "$repo/data/cmudict-sample"
printf 'make-demo-data: made %s\n' "$repo/data/cmudict-sample"

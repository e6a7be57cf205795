#!/usr/bin/env bash
# Side-by-side A/B of one benchmark: an older commit against the working tree, alternating.
#
#   bench/ab.sh <git-ref> <rounds> bench/bench_spark.py --records 500000
#
# The older code runs from a temporary worktree (its own benchmark script, sources and broker),
# both with this checkout's virtualenv. Each run's JSON is printed under a "== before|after k"
# line; alternating rounds keep the shared machine's drift out of the comparison.
set -euo pipefail
ref=$1 rounds=$2 script=$3
shift 3
root=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-$root/.venv/bin/python}
old=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$old" >/dev/null 2>&1 || true' EXIT
git -C "$root" worktree add --detach --quiet "$old" "$ref"
for k in $(seq 1 "$rounds"); do
  echo "== before $k ($ref)"
  (cd "$old" && PYTHONPATH="$old/src" "$py" "$script" "$@" 2>/dev/null)
  echo "== after $k"
  (cd "$root" && PYTHONPATH="$root/src" "$py" "$script" "$@" 2>/dev/null)
done

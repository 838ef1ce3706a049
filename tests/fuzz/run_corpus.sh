#!/usr/bin/env bash
# Feeds every file of a seed corpus to a stdin-built fuzz target; fails on the
# first input that crashes it.
set -euo pipefail
exe=$1 dir=$2
n=0
for f in "$dir"/*; do
  [ -f "$f" ] || continue
  "$exe" "$f" || { echo "crash on $f" >&2; exit 1; }
  n=$((n + 1))
done
echo "$n inputs from $dir: no crash"

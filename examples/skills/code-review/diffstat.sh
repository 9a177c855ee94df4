#!/bin/sh
# diffstat.sh [FILE]: lines added and removed per file of a unified diff (FILE or stdin).
set -eu
awk '
  /^\+\+\+ / { file = $2; sub(/^b\//, "", file); if (!(file in seen)) { seen[file] = 1; order[++n] = file } next }
  /^--- / { next }
  /^\+/ { added[file]++; total_added++ }
  /^-/ { removed[file]++; total_removed++ }
  END {
    for (i = 1; i <= n; i++) printf "%s +%d -%d\n", order[i], added[order[i]], removed[order[i]]
    printf "%d files, +%d -%d\n", n, total_added, total_removed
  }
' "${1:--}"

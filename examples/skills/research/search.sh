#!/bin/sh
# search.sh WORDS [DIR]: the lines of the files under DIR (default: the sandbox) that
# contain WORDS, ignoring case, as path:line: text; at most 50, skills/ left out.
set -eu
[ $# -ge 1 ] || { echo "usage: search.sh WORDS [DIR]" >&2; exit 2; }
grep -rIin --exclude-dir=skills -- "$1" "${2:-.}" | head -n 50

#!/usr/bin/env bash
# What worker pods in containers need (hack/runcpods.py): runc, nftables, iproute2 and
# debootstrap (for the image), installed with apt when missing; then the image,
# built once and cached, so that its first build is not charged to the first test.
# Root only: elsewhere worker pods run as local processes and the containment tests skip.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "pod-tools: not root: worker pods run as processes; the containment tests skip" >&2
  exit 0
fi
missing=()
for pair in runc:runc nft:nftables ip:iproute2 debootstrap:debootstrap; do
  command -v "${pair%%:*}" >/dev/null || missing+=("${pair#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
"${PYTHON:-.venv/bin/python}" -c 'import sys; sys.path.insert(0, "hack"); import runcpods; print(runcpods.image().rootfs)'

#!/usr/bin/env bash
# The gateway against HAProxy and nginx on loopback (see examples/cmd/peer-bench).
# Installs haproxy and nginx from the distribution's packages when missing, builds the
# gateway, runs every scenario and prints one Markdown table. Not part of CI.
# Extra arguments go to peer-bench (e.g. -only overhead, -gateway-cpuprofile cpu.pprof).
set -euo pipefail
cd "$(dirname "$0")/../.."

missing=()
command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || missing+=(haproxy)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing+=(nginx)
if [ ${#missing[@]} -gt 0 ]; then
	echo "installing ${missing[*]} with apt-get" >&2
	SUDO=""
	[ "$(id -u)" -eq 0 ] || SUDO="sudo"
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
export PATH="$PATH:/usr/sbin:/sbin"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
go build -C examples -o "$tmp/affinity-gateway" ./cmd/affinity-gateway
go build -C examples -o "$tmp/peer-bench" ./cmd/peer-bench
echo "haproxy: $(haproxy -v | head -1)" >&2
echo "nginx:   $(nginx -v 2>&1)" >&2
"$tmp/peer-bench" -gateway-bin "$tmp/affinity-gateway" "$@"

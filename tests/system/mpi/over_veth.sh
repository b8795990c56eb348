#!/bin/bash
# Runs COMMAND with a uroce daemon whose devices sit on the two ends of a
# veth pair, in a network namespace of its own (run it under
# `unshare --net`, with `--user --map-root-user` when not root): uroce0 on 10.0.0.1 (veth0),
# uroce1 on 10.0.0.2 (veth1). Interfaces that are not loopback are what
# libfabric's verbs provider needs to offer MSG and RDM endpoints on a
# device. The environment names the daemon's runtime directory (what
# `uroce env` would print for it) and UROCED the daemon.
# usage: over_veth.sh COMMAND...
set -euo pipefail
ip link set lo up
ip link add veth0 type veth peer name veth1
ip addr add 10.0.0.1/24 dev veth0
ip addr add 10.0.0.2/24 dev veth1
ip link set veth0 up
ip link set veth1 up
"$UROCED" --runtime-dir "$UROCE_RUNTIME_DIR" --device uroce0=10.0.0.1 --device uroce1=10.0.0.2 \
  2> "$UROCE_RUNTIME_DIR/uroced.log" &
daemon=$!
trap 'kill $daemon 2>/dev/null; wait $daemon 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  [ -e "$SYSFS_PATH/class/infiniband_verbs/uverbs-uroce1" ] && break
  sleep 0.1
done
"$@"

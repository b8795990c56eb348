#!/bin/bash
# Open MPI's remote shell (plm_rsh_agent) for hosts that are network
# namespaces on this machine: runs COMMAND in HOST's namespace with the
# environment of that host's uroce daemon, and with HOST as its host name
# (Open MPI 5 takes daemons that report one name for one node).
# $UROCE_NETNS_HOSTS names a folder with, for each HOST (its address),
# HOST.netns (the namespace's name) and HOST.env (NAME=VALUE lines).
# usage: netns_agent.sh HOST COMMAND...
set -euo pipefail
host=$1
shift
mapfile -t environment < "$UROCE_NETNS_HOSTS/$host.env"
exec ip netns exec "$(cat "$UROCE_NETNS_HOSTS/$host.netns")" \
  unshare --uts env "${environment[@]}" /bin/sh -c 'hostname "$0" && exec /bin/sh -c "$1"' \
  "$host" "$*"

#!/bin/sh
# Runs PROGRAM with its rank's uroce device (uroce0 for rank 0, uroce1 for
# rank 1) named to UCX (ucx: UCX_NET_DEVICES=uroceN:1) or to libfabric's
# verbs provider (verbs: FI_VERBS_DEVICE_NAME=uroceN). One mpirun command
# line for all ranks: Open MPI 5.0's mpirun crashes on MPMD ones (A : B).
# usage: on_rank_device.sh ucx|verbs PROGRAM [ARGS...]
set -eu
rank=${OMPI_COMM_WORLD_RANK:?not started by Open MPI}
case "$1" in
  ucx) export UCX_NET_DEVICES="uroce$rank:1" ;;
  verbs) export FI_VERBS_DEVICE_NAME="uroce$rank" ;;
  *) echo "usage: $0 ucx|verbs PROGRAM [ARGS...]" >&2; exit 2 ;;
esac
shift
exec "$@"

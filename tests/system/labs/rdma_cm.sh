#!/bin/sh
# Lab 10: rdma_cm. rping connects to a server by IP address and port, the
# way TCP does; the connection manager (CM) finds the device, exchanges the
# QP numbers and PSNs in MADs (REQ, REP, RTU; DREQ, DREP at the end) and
# moves both QPs to RTS. This script runs one rping server on uroce1
# (127.0.0.2) and one client, and shows what the daemon sees on the way.
#
# Run it with the devices visible, from the top of the checkout:
#     build/bin/uroce exec -- tests/system/labs/rdma_cm.sh
# UROCE names the uroce command (default: build/bin/uroce next to this
# checkout); PORT the rdma_cm port (default 7471); COUNT the pings (5).
set -eu

here=$(dirname "$0")
UROCE=${UROCE:-$here/../../../build/bin/uroce}
PORT=${PORT:-7471}
COUNT=${COUNT:-5}

counters() {  # the CM counters of both devices
    "$UROCE" stats | grep -E '^device|cm_mads'
}

echo "== CM counters before"
counters

echo "== rping server listening on 127.0.0.2 port $PORT"
rping -s -a 127.0.0.2 -p "$PORT" -C "$COUNT" -v > "${TMPDIR:-/tmp}/rping-server.$$" 2>&1 &
server=$!
# Wait (at most 10 s) until the daemon lists the server's listening cm id.
tries=0
until "$UROCE" status | grep -q "pid $server tcp listen 127.0.0.2:$PORT "; do
    tries=$((tries + 1))
    if [ "$tries" -gt 100 ]; then echo "the server did not listen"; exit 1; fi
    sleep 0.1
done
"$UROCE" status | grep -E '^rdma_cm|cm id'

echo "== rping client: $COUNT pings, data checked (-V)"
rping -c -a 127.0.0.2 -p "$PORT" -C "$COUNT" -v -V
wait "$server"
echo "== the server printed"
cat "${TMPDIR:-/tmp}/rping-server.$$"
rm -f "${TMPDIR:-/tmp}/rping-server.$$"

echo "== CM counters after"
counters

"""Bounded fuzzing campaigns against the rdma_cm side of a real daemon, the
ones that found a daemon hung by one program's event channel, REQs whose
cost grew with every ID alive, connections torn down by forged REJs, one
program's tables starving the others, and replies crossing after fork:

- channel abuse: programs drain, write, close and replace their channel's
  descriptor, fork and hammer it, give unwritable response addresses, and
  some are killed midway; the daemon answers status within a second
  throughout and holds nothing once they are gone;
- forged CM MADs, from the peers' own addresses, blind and with the live
  connection's IDs read from a trace, while rping runs: rping finishes;
- exhaustion: one program takes every rdma_cm resource it may, in a random
  order, while rping runs beside it;
- the cost of a REQ with 65,536 IDs alive against none (within 2x).

Seeded and scaled as test_fuzz.py (UROCE_FUZZ_SEED, UROCE_FUZZ_SCALE)."""

import os
import random
import re
import socket
import struct
import subprocess
import tempfile
import threading
import time
import unittest

import harness
import roce_wire
from test_fuzz import SCALE, rng_for
from test_rdmacm_isolation import StatusWatch, misuse_program

SERVER, CLIENT = "127.0.0.2", "127.0.0.1"  # uroce1, uroce0
PINGS_BESIDE_FORGERIES = 10000


def udp_port(daemon):
    return int(daemon.args[daemon.args.index("--udp-port") + 1])


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def counter(daemon, device, name):
    return harness.parse_stats(daemon.stats_text())[device][name]


class Rping:
    """An rping pair in the background: the server on uroce1, the client
    from uroce0, `count` pings with their data checked (-V) and printed (-v,
    which tells rping's own exit race from a failure)."""

    def __init__(self, daemon, count):
        self.daemon = daemon
        self.count = count
        self.port = harness.free_tcp_port()
        common = ["-a", SERVER, "-p", str(self.port), "-C", str(count), "-V", "-v"]
        rping = harness.require_program("rping")
        env = daemon.env()
        # Files, not pipes: nobody reads while the pings run.
        self.outputs = [tempfile.TemporaryFile("w+") for _ in range(2)]
        self.server = subprocess.Popen([rping, "-s", *common], env=env, stdin=subprocess.DEVNULL,
                                       stdout=self.outputs[1], stderr=subprocess.STDOUT)
        harness.wait_for(lambda: self.server.poll() is not None or
                         "tcp listen %s:%d " % (SERVER, self.port) in daemon.status().text,
                         15.0, "rping to listen", daemon.log)
        self.started = time.monotonic()
        self.client = subprocess.Popen([rping, "-c", *common], env=env, stdin=subprocess.DEVNULL,
                                       stdout=self.outputs[0], stderr=subprocess.STDOUT)

    def established(self):
        return len(re.findall(r"tcp connect cm established", self.daemon.status().text)) == 2

    def finish(self, test, timeout=120):
        outputs = []
        for proc, output in zip((self.client, self.server), self.outputs):
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            output.seek(0)
            text = output.read()
            outputs.append(text if proc.returncode == 0 else text[-4000:])
        elapsed = time.monotonic() - self.started
        for name, proc, output in (("client", self.client, outputs[0]),
                                   ("server", self.server, outputs[1])):
            if proc.returncode != 0 and name == "client" and harness.rping_lost_its_exit_race(
                    output, self.count):
                continue
            test.assertEqual(proc.returncode, 0, "rping %s:\n%s\n%s" % (
                name, output, self.daemon.log()))
        return elapsed


class Forger:
    """Sends UD datagrams to QP1 of a device from an address of this host,
    as a peer on the network would (any UDP source port)."""

    def __init__(self, daemon, source):
        self.port = udp_port(daemon)
        self.source = source
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((source, 0))
        self.src_port = self.sock.getsockname()[1]
        self.sent = 0

    def send(self, dst, mad):
        self.sock.sendto(roce_wire.ud_datagram(self.source, dst, self.src_port, self.port, mad),
                         (dst, self.port))
        self.sent += 1

    def close(self):
        self.sock.close()


class ChannelAbuseFuzzTest(harness.DaemonTestCase):
    """Programs misuse their channels at random, several at once, some
    killed midway: status answers within a second throughout, every program
    that is not killed succeeds, and nothing is left once all are gone."""

    MODES = ("drain", "fill", "close", "replace", "fork")

    def test_channel_abuse(self):
        rng = rng_for(self)
        with StatusWatch(self.daemon) as watch:
            for batch in range(4 * SCALE):
                procs = []
                for _ in range(4):
                    mode = rng.choice(self.MODES)
                    args = [misuse_program(), mode] + (["%d" % rng.randrange(10, 400)]
                                                       if mode == "fork" else [])
                    proc = subprocess.Popen(args, env=self.daemon.env(), stdin=subprocess.DEVNULL,
                                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                            text=True)
                    procs.append((args, proc, rng.random() < 0.2))
                for args, proc, kill in procs:
                    if kill:
                        time.sleep(rng.random() * 0.05)
                        proc.kill()
                    output = proc.communicate(timeout=60)[0]
                    if not kill:
                        self.assertEqual(proc.returncode, 0, "%s:\n%s\n%s" % (
                            args, output, self.daemon.log()))
        watch.check(self)
        harness.wait_for(lambda: "  cm id " not in self.daemon.status().text and
                         "rdma_cm channels 0\n" in self.daemon.status().text, 10.0,
                         "every channel and ID to go", self.daemon.log)
        self.daemon.wait_until_idle()


class ForgedCmMadFuzzTest(harness.DaemonTestCase):
    """While rping runs between uroce0 and uroce1, CM MADs are forged from
    both devices' own addresses: blind ones with random IDs, and ones made
    with the live connection's IDs, QPNs and CA GUID read from a trace of
    it, each short of what the connection's peer would send (one ID wrong,
    the QPN wrong, only the peer's ID, a timeout without the peer's GUID,
    another address). rping finishes every ping; the daemon took the
    forgeries in (cm_mads_rcvd) and dropped them."""

    # The forgers are not the daemon's devices (--open: see PacketFuzzTest).
    daemon_args = ("--open",)

    def trace_connection(self, client):
        path = os.path.join(self.daemon.base, "cm.pcap")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            reply = client.call(harness.Op.TRACE_START, harness.trace_start_body("uroce0"), fds=[fd])
        finally:
            os.close(fd)
        self.assertEqual(reply.error, 0, reply.message)
        return path

    def blind(self, rng, forger, rping_port):
        """A MAD with random IDs (a REQ only to ports nobody listens on)."""
        ids = lambda: rng.getrandbits(32)
        kind = rng.randrange(6)
        if kind == 0:
            port = rng.choice([p for p in (7000, 7001, 9999) if p != rping_port])
            return roce_wire.req(ids(), port, forger.source, rng.choice((SERVER, CLIENT)))
        if kind == 1:
            return roce_wire.rej(ids(), rng.choice((0, ids())),
                                 rng.choice((roce_wire.REJ_TIMEOUT, roce_wire.REJ_CONSUMER, 10)),
                                 rng.choice((0, 1, 2)), os.urandom(rng.choice((0, 8))))
        if kind == 2:
            return roce_wire.dreq(ids(), ids(), rng.getrandbits(24))
        return roce_wire.two_ids(rng.choice((roce_wire.RTU, roce_wire.DREP, roce_wire.MRA,
                                             roce_wire.REP)), ids(), ids())

    @staticmethod
    def near_misses(client_id, server_id, client_qpn, server_qpn):
        """(destination, message) pairs that name the live connection but
        are short of what its peer sends, as a forger who saw it set up."""
        wrong_guid = struct.pack("!Q", 0x0123456789abcdef)
        return [
            # To the server, as from the client: only the client's ID (the
            # forgery that once tore the server down), a timeout without
            # the client's GUID, one of the two IDs wrong, the QPN wrong.
            (SERVER, roce_wire.rej(client_id, 0, roce_wire.REJ_CONSUMER)),
            (SERVER, roce_wire.rej(client_id, 0, roce_wire.REJ_TIMEOUT, ari=wrong_guid)),
            (SERVER, roce_wire.rej(client_id ^ 1, server_id, roce_wire.REJ_CONSUMER)),
            (SERVER, roce_wire.rej(client_id, server_id ^ 0x100, roce_wire.REJ_CONSUMER)),
            (SERVER, roce_wire.dreq(client_id ^ 0x8000, server_id, server_qpn)),
            (SERVER, roce_wire.dreq(client_id, server_id, server_qpn + 1)),
            (SERVER, roce_wire.two_ids(roce_wire.DREP, client_id, server_id ^ 4)),
            # To the client, as from the server.
            (CLIENT, roce_wire.rej(server_id, 0, roce_wire.REJ_CONSUMER)),
            (CLIENT, roce_wire.rej(server_id ^ 1, client_id, roce_wire.REJ_CONSUMER,
                                   roce_wire.REJECTED_REQ)),
            (CLIENT, roce_wire.dreq(server_id, client_id, client_qpn ^ 1)),
            (CLIENT, roce_wire.dreq(server_id ^ 2, client_id, client_qpn)),
        ]

    def test_forged_mads_leave_a_live_connection_alone(self):
        rng = rng_for(self)
        from_client = Forger(self.daemon, CLIENT)
        from_server = Forger(self.daemon, SERVER)
        from_stranger = Forger(self.daemon, "127.0.0.3")
        before = harness.parse_stats(self.daemon.stats_text())
        with self.daemon.raw_client() as tracer:
            pcap = self.trace_connection(tracer)
            # Enough pings to outlast the forgeries several times over (a
            # ping takes about 2.5 ms on a loaded 2-core machine), checked below.
            rping = Rping(self.daemon, PINGS_BESIDE_FORGERIES)
            try:
                harness.wait_for(rping.established, 15.0, "rping to connect", self.daemon.log)
                mads = {a: m for a, m, _, _ in roce_wire.cm_mads_in_pcap(pcap)}
                self.assertIn(roce_wire.REQ, mads)
                self.assertIn(roce_wire.REP, mads)
                client_id, = struct.unpack_from("!I", mads[roce_wire.REQ], 0)
                client_qpn = struct.unpack_from("!I", mads[roce_wire.REQ], 32)[0] >> 8
                server_id, = struct.unpack_from("!I", mads[roce_wire.REP], 0)
                server_qpn = struct.unpack_from("!I", mads[roce_wire.REP], 12)[0] >> 8
                for _ in range(3 * SCALE):
                    for dst, mad in self.near_misses(client_id, server_id, client_qpn,
                                                     server_qpn):
                        (from_client if dst == SERVER else from_server).send(dst, mad)
                        # The whole truth, from an address that is not the peer's.
                        from_stranger.send(dst, roce_wire.dreq(
                            client_id if dst == SERVER else server_id,
                            server_id if dst == SERVER else client_id,
                            server_qpn if dst == SERVER else client_qpn))
                    for _ in range(300):
                        forger = rng.choice((from_client, from_server))
                        forger.send(rng.choice((SERVER, CLIENT)),
                                    self.blind(rng, forger, rping.port))
                    time.sleep(0.01)
                self.assertIsNone(rping.client.poll(),
                                  "rping ended before the forgeries did: raise its count")
                elapsed = rping.finish(self)
            finally:
                for proc in (rping.client, rping.server):
                    if proc.poll() is None:
                        proc.kill()
                        proc.wait()
                for forger in (from_client, from_server, from_stranger):
                    forger.close()
        sent = from_client.sent + from_server.sent + from_stranger.sent
        after = harness.parse_stats(self.daemon.stats_text())
        received = sum(after[d]["cm_mads_rcvd"] - before[d]["cm_mads_rcvd"]
                       for d in harness.DEFAULT_DEVICES)
        dropped = sum(after[d]["cm_mads_dropped"] - before[d]["cm_mads_dropped"]
                      for d in harness.DEFAULT_DEVICES)
        # Every forgery reached a CM (over UDP; the honest MADs take the shortcut
        # and count too), and none but the blind REQs and DREQs had an answer.
        self.assertGreaterEqual(received, sent, after)
        self.assertGreater(dropped, sent // 2, after)
        print("rping %d pings in %.1f s beside %d forged MADs" % (PINGS_BESIDE_FORGERIES, elapsed, sent))
        self.daemon.assert_alive(self)


class ExhaustionFuzzTest(harness.DaemonTestCase):
    """One program takes every rdma_cm resource it may (IDs, joins,
    channels) while rping runs beside it: rping finishes, status answers
    within a second, and the holder is refused with the man page's errno."""

    def test_one_program_exhausts_while_another_works(self):
        rng = rng_for(self)
        for _ in range(SCALE):
            mode = rng.choice(("hold", "ids"))
            with StatusWatch(self.daemon) as watch:
                rping = Rping(self.daemon, 5000)
                holder = subprocess.Popen([misuse_program(), mode], env=self.daemon.env(),
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True)
                try:
                    lines = [holder.stdout.readline() for _ in range(3 if mode == "hold" else 1)]
                    for line in lines:
                        self.assertRegex(line, r"^\w+ \d+ errno E[A-Z]+$", "".join(lines))
                    rping.finish(self)
                finally:
                    holder.communicate("", timeout=60)
                    for proc in (rping.client, rping.server):
                        if proc.poll() is None:
                            proc.kill()
                            proc.wait()
            watch.check(self)
        harness.wait_for(lambda: "  cm id " not in self.daemon.status().text, 10.0,
                         "the holders' IDs to go", self.daemon.log)


class ReqCostTest(harness.DaemonTestCase):
    """A REQ finds its listener, and a duplicate its connection, through
    indexes: 20,000 REQs to a port nobody listens on cost the daemon the
    same CPU (within 2x) with 65,536 rdma_cm IDs alive (two programs at
    their share) as with none, and an rping beside such a flood connects,
    pings and disconnects with no CM MAD lost (none sent again). rping's
    wall-clock times are printed, not compared: beside another test on two
    cores they vary tenfold."""

    daemon_args = ("--open",)  # the forger is not one of the daemon's devices

    REQS = 20000

    BURST = 200  # what the daemon's socket holds with room to spare

    def flood(self, rng):
        """The daemon's CPU seconds per REQ it received, over REQS REQs sent
        in bursts, each taken before the next (built beforehand, so that
        the daemon's time is spent on them and not waiting for them)."""
        forger = Forger(self.daemon, "127.0.0.9")
        datagrams = [roce_wire.ud_datagram(
            forger.source, SERVER, forger.src_port, forger.port,
            roce_wire.req(rng.getrandbits(32) | 1, 9999, forger.source, SERVER))
            for _ in range(self.REQS)]
        pid = self.daemon.proc.pid
        received_before = counter(self.daemon, "uroce1", "cm_mads_rcvd")
        cpu_before = cpu_seconds(pid)
        try:
            for start in range(0, self.REQS, self.BURST):
                for datagram in datagrams[start:start + self.BURST]:
                    forger.sock.sendto(datagram, (SERVER, forger.port))
                sent = start + self.BURST
                harness.wait_for(lambda: counter(self.daemon, "uroce1", "cm_mads_rcvd") -
                                 received_before >= sent, 60.0, "the REQs to be taken",
                                 self.daemon.log)
        finally:
            forger.close()
        cpu = cpu_seconds(pid) - cpu_before
        received = counter(self.daemon, "uroce1", "cm_mads_rcvd") - received_before
        return cpu / received, cpu

    def rping_seconds(self, rng=None):
        """How long 1,000 pings take, beside a flood of REQs when `rng` is given."""
        rping = Rping(self.daemon, 1000)
        flood = threading.Thread(target=self.flood, args=(rng,)) if rng else None
        if flood:
            flood.start()
        try:
            return rping.finish(self)
        finally:
            if flood:
                flood.join()

    def cm_mads_retried(self):
        stats = harness.parse_stats(self.daemon.stats_text())
        return sum(stats[device]["cm_mads_retried"] for device in ("uroce0", "uroce1"))

    def cheapest_flood(self, rng):
        """The less costly of two floods: the daemon's CPU time also holds
        what the machine does meanwhile, which only ever adds."""
        return min(self.flood(rng), self.flood(rng))

    def test_a_req_costs_the_same_whatever_the_ids_alive(self):
        rng = rng_for(self)
        rping_idle = self.rping_seconds()
        alone, alone_total = self.cheapest_flood(rng)
        rping_alone = self.rping_seconds(rng)
        holders = [subprocess.Popen([misuse_program(), "ids"], env=self.daemon.env(),
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True) for _ in range(2)]
        try:
            held = sum(int(re.match(r"ids (\d+) ", h.stdout.readline()).group(1))
                       for h in holders)
            self.assertGreaterEqual(held, 65536 - 2, "the holders made too few IDs")
            crowded, crowded_total = self.cheapest_flood(rng)
            retried_before = self.cm_mads_retried()
            rping_crowded = self.rping_seconds(rng)
            retried = self.cm_mads_retried() - retried_before
        finally:
            for holder in holders:
                holder.communicate("", timeout=120)
        print("uroced CPU for %d REQs: %.2f s with no rdma_cm IDs, %.2f s with %d; rping of "
              "1,000 pings: %.2f s with nothing beside it, %.2f s beside the REQs, %.2f s "
              "beside the REQs and the IDs (%d CM MADs sent again)" % (
                  self.REQS, alone_total, crowded_total, held, rping_idle, rping_alone,
                  rping_crowded, retried))
        # Every MAD between two devices of one daemon arrives: a retry means
        # one was lost (the REJs to the forger are never sent again).
        self.assertEqual(retried, 0, "rping beside the REQs and the IDs had %d CM MADs "
                         "sent again" % retried)
        self.assertLess(crowded, 2 * alone + 0.05 / self.REQS,
                        "a REQ costs %.1f us with %d IDs alive, %.1f us with none" % (
                            crowded * 1e6, held, alone * 1e6))


if __name__ == "__main__":
    unittest.main()

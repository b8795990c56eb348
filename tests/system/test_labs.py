"""The teaching labs (docs/labs/): each lab's steps run against a real daemon
as a student runs them, the lab programs of tests/system/labs/ among them,
and the observations each lab's questions rely on asserted: completion
statuses, QP states and transitions in `uroce qp --json`, counters of
`uroce stats` that move, packets held in step mode, traces decoded by
tshark. Expected values come from what each test did (sizes, counts,
settings), not from the daemon's output.

A lab program run with --wait stops at each "[paused] ..." line until it
reads a line on stdin; the tests look at the daemon there, as the lab
tells students to."""

import ipaddress
import json
import math
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import harness

LABS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "labs")
PSN_SPACE = 1 << 24
MTU = 1024  # the path MTU the lab programs set
RC_SEND_FIRST, RC_SEND_MIDDLE, RC_SEND_LAST, RC_SEND_LAST_IMM, RC_SEND_ONLY = 0, 1, 2, 3, 4
RC_ACKNOWLEDGE = 0x11
AETH_NAK = 3  # AETH syndrome opcode (IBA 9.7.5.1)
NAK_INVALID_REQUEST = 1
CM_ATTRIBUTES = {0x0010: "REQ", 0x0013: "REP", 0x0014: "RTU", 0x0015: "DREQ", 0x0016: "DREP"}


def packets_of(size):
    return max(1, math.ceil(size / MTU))


class LabProgram:
    """A lab program in a child process: its story read line by line, Enter
    pressed at each pause. stderr goes to a file (read once it exits)."""

    def __init__(self, test, args, env):
        self.test = test
        self.errors = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.errors, env=env)
        self.lines = []
        self.buffer = b""
        test.addCleanup(self.close)

    def transcript(self):
        self.errors.seek(0)
        return "--- program stdout ---\n%s\n--- stderr ---\n%s\n%s" % (
            "\n".join(self.lines), self.errors.read().decode(errors="replace"),
            self.test.daemon.log())

    def _read_line(self, deadline):
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        self.lines.append(line.decode())
        return self.lines[-1]

    def expect(self, pattern, timeout=30.0):
        """Reads lines until one matches `pattern`; returns the match."""
        deadline = time.monotonic() + timeout
        while True:
            line = self._read_line(deadline)
            if line is None:
                raise AssertionError("the lab program never printed a line matching %r\n%s" % (
                    pattern, self.transcript()))
            if m := re.search(pattern, line):
                return m

    def paused(self, timeout=30.0):
        return self.expect(r"^\[paused\] ", timeout)

    def enter(self):
        self.proc.stdin.write(b"\n")
        self.proc.stdin.flush()

    def finish(self, timeout=60.0, status=0):
        """Waits for the exit (pressing Enter at any pause left), checks its
        exit status; returns its stdout."""
        deadline = time.monotonic() + timeout
        self.proc.stdin.close()
        while self._read_line(deadline) is not None:
            pass
        try:
            self.proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise AssertionError("the lab program did not exit\n" + self.transcript())
        self.test.assertEqual(self.proc.returncode, status, self.transcript())
        return "\n".join(self.lines)

    def stderr(self):
        self.errors.seek(0)
        return self.errors.read().decode(errors="replace")

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        self.errors.close()


class LabTestCase(harness.DaemonTestCase):
    """A private daemon per lab; the uroce command and the lab programs
    pointed at it."""

    @classmethod
    def setUpClass(cls):
        harness.require_pyverbs()
        super().setUpClass()

    def setUp(self):
        self.tool = harness.tool_path()
        if not self.tool:
            self.fail("the uroce command is not built (UROCE_TOOL is not set)")
        self.tool_env = harness.tool_environment(self.daemon.runtime_dir)

    def uroce(self, *args, check=True):
        result = harness.run_program([self.tool, *args], env=self.tool_env,
                                     log=self.daemon.log)
        if check:
            self.assertEqual(result.returncode, 0, "uroce %s: %s%s\n%s" % (
                " ".join(args), result.stdout, result.stderr, self.daemon.log()))
        return result

    def stats(self):
        return harness.parse_stats(self.uroce("stats").stdout)

    def qp(self, device, qpn):
        qps = json.loads(self.uroce("qp", device, str(qpn), "--json").stdout)["qps"]
        self.assertEqual(len(qps), 1, qps)
        return qps[0]

    def lab(self, script, *args, env=None):
        """Starts tests/system/labs/`script` as a student runs it."""
        return LabProgram(self, [harness.PYTHON, os.path.join(LABS, script), *args],
                          env or self.daemon.env())

    def run_lab(self, script, *args):
        """Runs a lab program to its end; returns its stdout."""
        return self.lab(script, *args).finish()

    def held(self, device):
        """The packets `uroce step DEVICE` lists: [(id, summary)]."""
        lines = self.uroce("step", device).stdout.splitlines()
        return [(int(line.split()[0]), line.split(None, 3)[3]) for line in lines[1:]]

    def step(self, device, *action):
        return self.uroce("step", device, *action).stdout

    def pause_wire(self, device):
        self.assertEqual(self.step(device, "pause"), "%s: wire paused, 0 held\n" % device)
        self.addCleanup(self.uroce, "step", device, "run")

    def wait_held(self, device, predicate, what, timeout=20.0):
        return harness.wait_for(lambda: predicate(self.held(device)), timeout, what,
                                lambda: self.uroce("step", device).stdout + self.daemon.log())

    def set_faults(self, device, *options):
        self.uroce("fault", device, *options)
        self.addCleanup(self.uroce, "fault", device, "--clear")

    @staticmethod
    def delta(before, after, device, counter):
        return after[device][counter] - before[device][counter]

    def start_trace(self, device, name):
        """`uroce trace DEVICE --pcap FILE` until the returned function is
        called, which stops it and returns the file's path."""
        pcap = os.path.join(self.daemon.base, name)
        trace = subprocess.Popen([self.tool, "trace", device, "--pcap", pcap],
                                 env=self.tool_env, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: trace.poll() is None and (trace.kill(), trace.communicate()))
        harness.wait_for(lambda: "  tracing (" in self.daemon.status().text, 10.0,
                         "the trace to start", self.daemon.log)

        def stop():
            trace.send_signal(signal.SIGINT)
            out, err = trace.communicate(timeout=10)
            self.assertEqual(trace.returncode, 0, out + err)
            return pcap
        return stop

    def tshark(self, pcap, *fields):
        """The fields of each packet as tshark decodes them (hex and decimal
        numbers as ints, absent ones None)."""
        tshark = harness.require_program("tshark")
        port = self.daemon.args[self.daemon.args.index("--udp-port") + 1]
        result = harness.run_program(
            [tshark, "-r", pcap, "-d", "udp.port==%s,infiniband" % port, "-T", "fields",
             *[arg for field in fields for arg in ("-e", field)]],
            env=dict(os.environ, HOME=self.daemon.base), timeout=60)
        self.assertEqual(result.returncode, 0, result.stderr)

        def value(text):
            if not text:
                return None
            try:
                return int(text, 0)
            except ValueError:
                return text
        return [tuple(value(v) for v in (line.split("\t") + [""] * len(fields))[:len(fields)])
                for line in result.stdout.splitlines()]


# --- Lab 1 -------------------------------------------------------------------------

class Lab01DevicesPortsGids(LabTestCase):

    def test_the_tools_and_the_program_agree_on_devices_ports_and_gids(self):
        env = self.daemon.env()
        devices = harness.parse_ibv_devices(self.run_ok(
            [harness.require_program("ibv_devices")]).stdout)
        self.assertEqual(devices, {name: harness.guid_hex(harness.node_guid_for(address))
                                   for name, address in harness.DEFAULT_DEVICES.items()})

        info = harness.split_ibv_devinfo(self.run_ok(
            [harness.require_program("ibv_devinfo"), "-v"]).stdout)
        program = self.run_lab("devices_ports_gids.py")
        status = self.uroce("status").stdout
        links = self.run_ok(["rdma", "link"], env=env).stdout if shutil.which("rdma") else None
        for name, address in harness.DEFAULT_DEVICES.items():
            guid = harness.guid_colon(harness.node_guid_for(address))
            block = info[name]
            self.assertEqual(harness.devinfo_field(block, "node_guid"), guid)
            self.assertEqual(harness.devinfo_field(block, "state"), "PORT_ACTIVE (4)")
            self.assertEqual(harness.devinfo_field(block, "active_mtu"), "4096 (5)")
            self.assertEqual(harness.devinfo_field(block, "transport"), "InfiniBand (0)")
            self.assertEqual(harness.devinfo_field(block, "link_layer"), "Ethernet")
            self.assertEqual(harness.devinfo_field(block, "max_qp_rd_atom"), "128")
            self.assertIn("GID[  0]:\t\t%s, RoCE v2" % harness.gid0_for(address), block)
            # GID 1: fe80:: and the node GUID (the link-local address).
            link_local = "fe80:0000:0000:0000:" + guid
            self.assertIn("device %s: node_guid %s, 1 port(s)" % (name, guid), program)
            self.assertIn("  gid 0: %s  RoCE v2" % harness.gid0_groups_for(address), program)
            self.assertIn("  gid 1: %s  RoCE v2" % link_local, program)
            self.assertIn("device %s address %s node_guid %s\n  port 1 active max_mtu 4096 "
                          "active_mtu 4096 link_layer Ethernet\n  gid 0 %s RoCE v2\n" % (
                              name, address, guid, harness.gid0_for(address)), status)
            if links is not None:
                self.assertRegex(links, r"link %s/1 state ACTIVE physical_state LINK_UP "
                                        r"netdev lo" % name)

    def pingpong(self, *gid_option):
        program = harness.require_program("ibv_rc_pingpong")
        port = harness.free_tcp_port()
        common = [*gid_option, "-n", "10", "-p", str(port)]
        return harness.run_server_client(
            self.daemon.env(), [program, "-d", "uroce1", *common],
            [program, "-d", "uroce0", *common, "127.0.0.1"], port, log=self.daemon.log,
            linger=0.5)

    def test_the_gid_index_chooses_the_address(self):
        before = self.stats()
        server, client = self.pingpong("-g", "0")
        self.assertEqual((server.returncode, client.returncode), (0, 0), client.output)
        # GID 1 is link-local IPv6: no uroce device is reached that way.
        server, client = self.pingpong("-g", "1")
        self.assertNotEqual(client.returncode, 0)
        guid = harness.guid_colon(harness.node_guid_for(harness.DEFAULT_DEVICES["uroce0"]))
        self.assertIn("GID %s" % ipaddress.IPv6Address("fe80:0:0:0:" + guid), client.output)
        self.assertIn("Failed status transport retry counter exceeded (12)", client.output)
        self.assertEqual(self.delta(before, self.stats(), "uroce0", "retry_exceeded_err"), 1)
        # No GID at all: no GRH, which RoCE needs.
        server, client = self.pingpong()
        self.assertNotEqual(client.returncode, 0)
        self.assertIn("Failed to modify QP to RTR", server.output + client.output)
        self.assertIn("RoCE addresses need a GRH", self.daemon.log())

    def test_a_device_on_another_address_has_the_gid_and_guid_it_predicts(self):
        address = "127.0.0.5"
        other = harness.Daemon(["--device", "uroce5=" + address])
        try:
            other.start()
            info = harness.split_ibv_devinfo(other.run(
                [harness.require_program("ibv_devinfo"), "-v"]).stdout)
            self.assertEqual(list(info), ["uroce5"])
            self.assertEqual(harness.devinfo_field(info["uroce5"], "node_guid"),
                             harness.guid_colon(harness.node_guid_for(address)))
            self.assertIn("GID[  0]:\t\t::ffff:%s, RoCE v2" % address, info["uroce5"])
        finally:
            other.stop()
            other.cleanup()


# --- Lab 2 -------------------------------------------------------------------------

class Lab02QpStateMachine(LabTestCase):

    def test_transitions_by_hand(self):
        env = dict(self.daemon.env(), VERBS_LOG_LEVEL="1", VERBS_LOG_FILE="/dev/stderr")
        lab = self.lab("qp_state_machine.py", "--wait", env=env)
        m = lab.expect(r"^created: uroce0 QP (\d+) \(RC\) in RESET; its peer will be uroce1 "
                       r"QP (\d+)")
        qpn, peer = int(m.group(1)), int(m.group(2))

        lab.paused()
        qp = self.qp("uroce0", qpn)
        self.assertEqual((qp["state"], qp["previous_state"], qp["transition_count"]),
                         ("RESET", None, 0))
        lab.enter()
        lab.expect(r"^refused:  RESET -> RTR with IBV_QP_STATE: errno 22 \(EINVAL\)")
        lab.expect(r"^refused:  RESET -> INIT with IBV_QP_STATE: errno 22")
        lab.expect(r"^accepted: RESET -> INIT with ")
        lab.paused()
        qp = self.qp("uroce0", qpn)
        self.assertEqual((qp["state"], qp["previous_state"], qp["transition_count"]),
                         ("INIT", "RESET", 1))

        lab.enter()
        lab.expect(r"^refused:  ibv_post_send in INIT: errno 22 \(EINVAL\)$")
        m = lab.expect(r"^refused:  INIT -> RTR with (\S+): errno 22")
        self.assertNotIn("IBV_QP_AV", m.group(1))
        m = lab.expect(r"^accepted: INIT -> RTR with (\S+);")
        self.assertIn("IBV_QP_AV", m.group(1).split("|"))
        lab.paused()
        qp = self.qp("uroce0", qpn)
        self.assertEqual((qp["state"], qp["previous_state"]), ("RTR", "INIT"))
        self.assertEqual(qp["peer"], {"address": harness.DEFAULT_DEVICES["uroce1"],
                                      "qpn": peer})
        self.assertEqual((qp["expected_psn"], qp["path_mtu"]), (1000, MTU))
        self.assertEqual(qp["receive_queue"]["queued"], 1)

        lab.enter()
        lab.expect(r"^refused:  RTR -> RTS with IBV_QP_STATE: errno 22")
        lab.expect(r"^accepted: RTR -> RTS with ")
        lab.paused()
        qp = self.qp("uroce0", qpn)
        self.assertEqual((qp["state"], qp["sq_psn"], qp["timeout"]), ("RTS", 2000, 14))
        self.assertEqual((qp["retry_cnt"], qp["retries_left"], qp["rnr_retries_left"]),
                         (7, 7, "infinite"))

        lab.enter()
        lab.expect(r"^refused:  RTS -> INIT with IBV_QP_STATE: errno 22")
        lab.expect(r"^accepted: RTS -> ERR ")
        lab.expect(r"^completion: wr_id=42 status=IBV_WC_WR_FLUSH_ERR qp_num=%d " % qpn)
        lab.paused()
        qp = self.qp("uroce0", qpn)
        self.assertEqual((qp["state"], qp["last_error"]["what"]), ("ERR", "ibv_modify_qp"))

        lab.enter()
        lab.expect(r"^refused:  ERR -> RTS with IBV_QP_STATE: errno 22")
        lab.expect(r"^accepted: ERR -> RESET ")
        lab.paused()
        accepted = [tuple(re.match(r"accepted: (\w+) -> (\w+)", line).groups())
                    for line in lab.lines if line.startswith("accepted:")]
        qp = self.qp("uroce0", qpn)
        self.assertEqual([(t["from"], t["to"]) for t in qp["transitions"]], accepted)
        self.assertEqual(qp["transition_count"], len(accepted))
        details = self.uroce("qp", "uroce0", str(qpn)).stdout
        self.assertIn("transitions (%d, newest last):" % len(accepted), details)
        shown = re.findall(r"^  \S+ ago  (\w+) -> (\w+)  ", details, re.M)
        self.assertEqual(shown, accepted, details)

        output = lab.finish()
        refused = [line for line in output.splitlines() if re.match(r"refused: +\w+ -> ", line)]
        reasons = re.findall(r"^uroce: modify_qp: Invalid argument: (.*)$", lab.stderr(), re.M)
        self.assertEqual(len(reasons), len(refused), lab.transcript())
        self.assertIn("RC RESET->RTR is not a valid transition", reasons)
        self.assertIn("RC INIT->RTR requires IBV_QP_AV", reasons)
        self.assertIn("RC ERR->RTS is not a valid transition", reasons)


# --- Lab 3 -------------------------------------------------------------------------

class Lab03SendRecv(LabTestCase):

    def test_ibv_rc_pingpong(self):
        iters, size = 200, 4096
        server, client = harness.run_pingpong(self.daemon.env(), "uroce1", "uroce0", iters,
                                              size, log=self.daemon.log)
        for side in (server, client):
            self.assertEqual(side.returncode, 0, side.output)
            self.assertIn("%d bytes in " % (2 * iters * size), side.output)
            self.assertIn("%d iters in " % iters, side.output)

    def test_send_recv_completions_and_their_packets(self):
        stop_trace = self.start_trace("uroce0", "send_recv.pcap")
        before = self.stats()
        lab = self.lab("send_recv.py", "--wait")
        m = lab.expect(r"^connected: uroce0 QP (\d+) <-> uroce1 QP (\d+)")
        qa, qb = int(m.group(1)), int(m.group(2))
        lab.paused()
        self.assertEqual(self.qp("uroce1", qb)["receive_queue"]["queued"], 4)

        lab.enter()
        lab.expect(r"^uroce0 completion: wr_id=1 status=IBV_WC_SUCCESS opcode=IBV_WC_SEND "
                   r"qp_num=%d$" % qa)
        lab.expect(r"^uroce1 completion: wr_id=100 status=IBV_WC_SUCCESS opcode=IBV_WC_RECV "
                   r"byte_len=100 qp_num=%d$" % qb)
        lab.expect(r"holds the 100 bytes sent: True")
        lab.paused()
        after = self.stats()
        self.assertEqual(self.delta(before, after, "uroce0", "rdma_sends"), 1)
        self.assertEqual(self.delta(before, after, "uroce1", "rdma_recvs"), 1)
        receiver = self.qp("uroce1", qb)["receive_queue"]
        self.assertEqual((receiver["queued"], receiver["completed"]), (3, 1))
        self.assertEqual(self.qp("uroce0", qa)["send_queue"]["completed"], 1)

        lab.enter()
        lab.expect(r"^uroce1 completion: wr_id=101 status=IBV_WC_SUCCESS opcode=IBV_WC_RECV "
                   r"byte_len=3000 qp_num=%d imm_data=0x1234$" % qb)
        lab.expect(r"^uroce1 completion: wr_id=102 .* byte_len=200 ")
        lab.expect(r"^uroce0 completions for the unsignaled SEND: 0$")
        lab.paused()
        self.assertEqual(self.qp("uroce0", qa)["send_queue"]["completed"], 3)

        lab.enter()
        lab.expect(r"^uroce1 completion: wr_id=103 status=IBV_WC_LOC_LEN_ERR ")
        lab.expect(r"^uroce0 completion: wr_id=4 status=IBV_WC_REM_INV_REQ_ERR ")
        lab.expect(r"^states: uroce0 QP %d ERR, uroce1 QP %d ERR$" % (qa, qb))
        lab.paused()
        # The NAK names the first packet that did not fit the 4096-byte receive.
        sizes = (100, 3000, 200)
        first_of_last = sum(packets_of(s) for s in sizes)
        nak_psn = first_of_last + 4096 // MTU
        requester, responder = self.qp("uroce0", qa), self.qp("uroce1", qb)
        self.assertEqual(requester["last_error"]["what"],
                         "requester: remote invalid request error")
        self.assertEqual({k: responder["last_nak"][k] for k in ("direction", "kind", "code",
                                                                "psn")},
                         {"direction": "sent", "kind": "NAK", "code": "invalid request",
                          "psn": nak_psn})
        lab.finish()

        packets = self.tshark(stop_trace(), "ip.src", "ip.dst", "infiniband.bth.destqp",
                              "infiniband.bth.opcode", "infiniband.bth.psn",
                              "infiniband.aeth.syndrome.opcode", "infiniband.aeth.msn",
                              "infiniband.aeth.syndrome.error_code")
        requests = [(op, psn) for src, dst, qpn, op, psn, *_ in packets
                    if src == "127.0.0.1" and qpn == qb]
        last = packets_of(5000)
        self.assertEqual([op for op, _ in requests],
                         [RC_SEND_ONLY, RC_SEND_FIRST, RC_SEND_MIDDLE, RC_SEND_LAST_IMM,
                          RC_SEND_ONLY, RC_SEND_FIRST] + [RC_SEND_MIDDLE] * (last - 2) +
                         [RC_SEND_LAST])
        self.assertEqual([psn for _, psn in requests], list(range(first_of_last + last)))
        # One ACK at the end of each message, its MSN counting the messages;
        # then the NAK.
        answers = [(op, psn, aeth, msn, code) for src, _, qpn, op, psn, aeth, msn, code
                   in packets if src == "127.0.0.2" and qpn == qa]
        ends = [sum(packets_of(s) for s in sizes[:i + 1]) - 1 for i in range(len(sizes))]
        self.assertEqual(answers, [(RC_ACKNOWLEDGE, psn, 0, i + 1, None)
                                   for i, psn in enumerate(ends)] +
                         [(RC_ACKNOWLEDGE, nak_psn, AETH_NAK, len(sizes), NAK_INVALID_REQUEST)])

# --- Lab 4 -------------------------------------------------------------------------

class Lab04RdmaWriteRead(LabTestCase):

    def test_write_read_and_a_remote_access_error(self):
        before = self.stats()
        lab = self.lab("rdma_write_read.py", "--wait", "--mistake", "access")
        m = lab.expect(r"^connected: uroce0 QP (\d+) <-> uroce1 QP (\d+)")
        qa, qb = int(m.group(1)), int(m.group(2))
        lab.expect(r"^uroce0 completion: wr_id=1 status=IBV_WC_SUCCESS "
                   r"opcode=IBV_WC_RDMA_WRITE qp_num=%d$" % qa)
        lab.expect(r"^uroce1 memory now holds what uroce0 wrote: True$")
        lab.expect(r"^uroce1 completions for the WRITE: 0$")
        lab.paused()
        # The WRITE took PSNs (one per packet) but no receive.
        responder = self.qp("uroce1", qb)
        self.assertEqual(responder["expected_psn"], packets_of(4096))
        self.assertEqual(responder["receive_queue"]["completed"], 0)
        self.assertEqual(self.delta(before, self.stats(), "uroce0", "rdma_sends"), 1)

        lab.enter()
        lab.expect(r"^uroce0 completion: wr_id=2 status=IBV_WC_SUCCESS "
                   r"opcode=IBV_WC_RDMA_READ byte_len=4096 ")
        lab.expect(r"^uroce0 memory now holds uroce1's: True$")
        lab.expect(r"^uroce1 completion: wr_id=200 status=IBV_WC_SUCCESS "
                   r"opcode=IBV_WC_RECV_RDMA_WITH_IMM byte_len=64 qp_num=%d "
                   r"imm_data=0xcafe$" % qb)
        lab.paused()
        before = self.stats()
        lab.enter()
        lab.expect(r"^uroce0 completion: wr_id=4 status=IBV_WC_REM_ACCESS_ERR qp_num=%d" % qa)
        lab.expect(r"^uroce1 completion: wr_id=201 status=IBV_WC_WR_FLUSH_ERR ")
        lab.expect(r"^states: uroce0 QP %d ERR, uroce1 QP %d ERR$" % (qa, qb))
        lab.paused()
        after = self.stats()
        self.assertEqual(self.delta(before, after, "uroce0", "completer_retry_err"), 1)
        requester, responder = self.qp("uroce0", qa), self.qp("uroce1", qb)
        self.assertEqual(requester["last_error"]["what"], "requester: remote access error")
        self.assertEqual((requester["last_nak"]["direction"], requester["last_nak"]["code"]),
                         ("received", "remote access error"))
        # The WRITE and the READ took 4 PSNs each (a READ one per response
        # packet), the WRITE with immediate one: the bad WRITE starts at 9.
        bad_psn = 2 * packets_of(4096) + packets_of(64)
        self.assertEqual((responder["last_nak"]["direction"], responder["last_nak"]["code"],
                          responder["last_nak"]["psn"]), ("sent", "remote access error", bad_psn))
        self.assertTrue(responder["last_error"]["what"].startswith(
            "responder: NAK remote access error sent for PSN"), responder["last_error"])
        self.assertEqual(responder["transitions"][-1]["to"], "ERR")
        lab.finish()

    def test_the_other_mistakes(self):
        # A key, range or MR check fails: remote access error. A QP that
        # does not take RDMA WRITE at all: invalid request.
        for mistake, status in (("rkey", "IBV_WC_REM_ACCESS_ERR"),
                                ("bounds", "IBV_WC_REM_ACCESS_ERR"),
                                ("qp", "IBV_WC_REM_INV_REQ_ERR")):
            with self.subTest(mistake=mistake):
                output = self.run_lab("rdma_write_read.py", "--mistake", mistake)
                self.assertRegex(output, r"uroce0 completion: wr_id=4 status=%s " % status)
                self.assertRegex(output, r"states: uroce0 QP \d+ ERR, uroce1 QP \d+ ERR")


# --- Lab 5 -------------------------------------------------------------------------

class Lab05LossAndRecovery(LabTestCase):

    def test_messages_arrive_intact_through_drop_duplicate_and_reorder(self):
        self.set_faults("uroce0", "--drop", "15%", "--duplicate", "10%", "--reorder", "10%")
        before = self.stats()
        count = 40
        output = self.run_lab("loss_recovery.py", "--count", str(count))
        self.assertIn("done: %d messages delivered intact" % count, output)
        after = self.stats()
        d = lambda device, counter: self.delta(before, after, device, counter)
        self.assertGreater(d("uroce0", "fault_dropped"), 0)
        self.assertGreater(d("uroce0", "fault_duplicated"), 0)
        self.assertGreater(d("uroce0", "retransmit_timeouts") + d("uroce0", "rcvd_seq_err"), 0)
        self.assertGreater(d("uroce1", "duplicate_request"), 0)
        self.assertGreater(d("uroce1", "out_of_seq_request"), 0)
        self.assertEqual(d("uroce1", "rdma_recvs"), count)

    def test_go_back_n_in_step_mode(self):
        self.pause_wire("uroce0")
        size = 4096
        lab = self.lab("loss_recovery.py", "--count", "2", "--size", str(size),
                       "--timeout", "20")
        qa = int(lab.expect(r"^connected: uroce0 QP (\d+) ").group(1))
        packets = packets_of(size)
        held = self.wait_held("uroce0", lambda h: len(h) >= packets and h,
                              "the first message's packets held")
        self.assertEqual([summary.split()[:3] for _, summary in held[:packets]],
                         [["RC_SEND_FIRST", "psn", "0"], ["RC_SEND_MIDDLE", "psn", "1"],
                          ["RC_SEND_MIDDLE", "psn", "2"], ["RC_SEND_LAST", "psn", "3"]])
        before = self.stats()
        first = held[0][0]
        self.assertIn("packet %d dropped" % first, self.step("uroce0", "drop"))
        for packet_id, _ in held[1:packets]:
            self.assertIn("packet %d released" % packet_id,
                          self.step("uroce0", "next", str(packet_id)))
        # The responder sees PSN 1 where it expects 0: it NAKs, and the
        # requester sends again from PSN 0 -- every packet of the message.
        newer = lambda h: [p for p in h if p[0] > held[packets - 1][0]]
        again = self.wait_held("uroce0", lambda h: len(newer(h)) >= packets and newer(h),
                               "the message sent again")
        self.assertEqual([summary.split()[2] for _, summary in again[:packets]],
                         [str(psn) for psn in range(packets)])
        after = self.stats()
        self.assertEqual(self.delta(before, after, "uroce0", "fault_dropped"), 1)
        self.assertEqual(self.delta(before, after, "uroce1", "out_of_seq_request"), packets - 1)
        self.assertEqual(self.delta(before, after, "uroce0", "rcvd_seq_err"), 1)
        nak = self.qp("uroce0", qa)["last_nak"]
        self.assertEqual((nak["direction"], nak["kind"], nak["code"], nak["psn"]),
                         ("received", "NAK", "PSN sequence error", 0))
        self.step("uroce0", "run")
        self.assertIn("done: 2 messages delivered intact", lab.finish())

    def test_a_lost_last_packet_comes_back_after_the_timeout(self):
        self.pause_wire("uroce0")
        lab = self.lab("loss_recovery.py", "--count", "1", "--size", "100", "--timeout", "18")
        qa = int(lab.expect(r"^connected: uroce0 QP (\d+) ").group(1))
        (victim, summary), = self.wait_held("uroce0", lambda h: h, "the SEND held")
        self.assertTrue(summary.startswith("RC_SEND_ONLY psn 0 "), summary)
        before = self.stats()
        self.step("uroce0", "drop", str(victim))
        dropped = time.monotonic()
        (retry, again), = self.wait_held("uroce0", lambda h: h, "the retransmission")
        waited = time.monotonic() - dropped
        self.assertGreater(retry, victim)
        self.assertTrue(again.startswith("RC_SEND_ONLY psn 0 "), again)
        after = self.stats()
        self.assertGreaterEqual(self.delta(before, after, "uroce0", "retransmit_timeouts"), 1)
        # timeout 18: 4.096 us * 2^18 = 1.07 s after the packet was sent.
        self.assertLess(waited, 4.096e-6 * 2 ** 18 + 3.0)
        qp = self.qp("uroce0", qa)
        self.assertLess(qp["retries_left"], qp["retry_cnt"])
        self.step("uroce0", "run")
        self.assertIn("done: 1 messages delivered intact", lab.finish())

    def test_a_wire_that_loses_everything_exhausts_retry_cnt(self):
        self.pause_wire("uroce0")
        before = self.stats()
        lab = self.lab("loss_recovery.py", "--wait", "--count", "1", "--size", "100",
                       "--timeout", "12")
        qa = int(lab.expect(r"^connected: uroce0 QP (\d+) .* retry_cnt (7)$").group(1))
        lab.paused()
        lab.enter()
        lab.expect(r"^message 0: uroce0 completion after \d+ ms: wr_id=0 "
                   r"status=IBV_WC_RETRY_EXC_ERR ")
        lab.expect(r"^message 0 failed; uroce0 QP %d is in ERR$" % qa)
        lab.paused()
        self.assertEqual(self.qp("uroce0", qa)["last_error"]["what"],
                         "requester: transport retry counter exceeded")
        # The first transmission and retry_cnt retries, all held.
        held = self.held("uroce0")
        self.assertEqual([summary.split()[:3] for _, summary in held],
                         [["RC_SEND_ONLY", "psn", "0"]] * (1 + 7))
        after = self.stats()
        self.assertEqual(self.delta(before, after, "uroce0", "retry_exceeded_err"), 1)
        # The timer expired once per retry and once more with none left.
        self.assertEqual(self.delta(before, after, "uroce0", "retransmit_timeouts"), 7 + 1)
        lab.finish(status=1)


# --- Lab 6 -------------------------------------------------------------------------

class Lab06ReceiverNotReady(LabTestCase):

    def test_rnr_naks_wait_and_exhaust(self):
        code, delay_us = 31, 491520  # min_rnr_timer 31: 491.52 ms (IBA table 45)
        before = self.stats()
        lab = self.lab("receiver_not_ready.py", "--wait", "--min-rnr-timer", str(code))
        m = lab.expect(r"^connected: uroce0 QP (\d+) -> uroce1 QP (\d+);")
        qa, qb = int(m.group(1)), int(m.group(2))
        lab.paused()
        qp = harness.wait_for(
            lambda: (q := self.qp("uroce0", qa))["timer"] and
            q["timer"]["for"].startswith("RNR wait") and q, 10.0, "the RNR wait timer",
            self.daemon.log)
        self.assertLessEqual(qp["timer"]["in_us"], delay_us)
        self.assertEqual({k: qp["last_nak"][k] for k in ("direction", "kind", "rnr_timer",
                                                         "psn")},
                         {"direction": "received", "kind": "RNR NAK", "rnr_timer": code,
                          "psn": 0})
        self.assertEqual(self.qp("uroce1", qb)["last_nak"]["direction"], "sent")
        self.assertEqual(self.qp("uroce1", qb)["min_rnr_timer"], code)
        first = self.stats()
        harness.wait_for(lambda: self.delta(first, self.stats(), "uroce0", "rcvd_rnr_err") > 0,
                         3 * delay_us / 1e6, "another RNR NAK after the timer",
                         self.daemon.log)
        lab.enter()
        lab.expect(r"^uroce0 completion: wr_id=1 status=IBV_WC_SUCCESS opcode=IBV_WC_SEND ")
        lab.expect(r"^uroce1 completion: wr_id=2 status=IBV_WC_SUCCESS opcode=IBV_WC_RECV "
                   r"byte_len=5 ")
        lab.paused()
        middle = self.stats()
        naks = self.delta(before, middle, "uroce0", "rcvd_rnr_err")
        self.assertGreaterEqual(naks, 2)
        self.assertEqual(self.delta(before, middle, "uroce1", "send_rnr_err"), naks)

        lab.enter()
        m = lab.expect(r"^connected: uroce0 QP (\d+) -> uroce1 QP \d+; uroce0 rnr_retry (\d+)")
        qc, rnr_retry = int(m.group(1)), int(m.group(2))
        lab.expect(r"^uroce0 completion: wr_id=3 status=IBV_WC_RNR_RETRY_EXC_ERR qp_num=%d" % qc)
        lab.expect(r"^states: uroce0 QP %d ERR, uroce1 QP \d+ RTS$" % qc)
        lab.paused()
        end = self.stats()
        self.assertEqual(self.delta(middle, end, "uroce0", "rcvd_rnr_err"), 1 + rnr_retry)
        self.assertEqual(self.delta(middle, end, "uroce0", "retry_rnr_exceeded_err"), 1)
        self.assertEqual(self.qp("uroce0", qc)["last_error"]["what"],
                         "requester: RNR retry counter exceeded")
        lab.finish()


# --- Lab 7 -------------------------------------------------------------------------

class Lab07AtomicsAndResponderResources(LabTestCase):

    def test_atomics_outstanding_and_a_duplicate_not_executed_twice(self):
        depth, burst = 2, 6
        lab = self.lab("atomics.py", "--wait", "--max-rd-atomic", str(depth),
                       "--max-dest-rd-atomic", str(depth), "--burst", str(burst))
        m = lab.expect(r"^connected: uroce0 QP (\d+) .* uroce1 QP (\d+)")
        qa, qb = int(m.group(1)), int(m.group(2))
        lab.expect(r"^  returned 100, counter now 105$")
        lab.expect(r"^  returned 105, counter now 1000$")
        lab.expect(r"^  returned 1000, counter now 1000 ")
        lab.paused()
        self.pause_wire("uroce0")
        lab.enter()
        held = self.wait_held("uroce0", lambda h: len(h) >= depth and h,
                              "%d atomics held" % depth)
        time.sleep(0.3)  # no more come: the requester waits for answers
        held = self.held("uroce0")
        self.assertEqual(len({summary.split()[2] for _, summary in held}), depth, held)
        self.assertTrue(all(s.startswith("RC_FETCH_ADD ") for _, s in held), held)
        requester = self.qp("uroce0", qa)
        self.assertEqual((requester["reads_outstanding"], requester["max_rd_atomic"]),
                         (depth, depth))
        self.assertEqual(self.qp("uroce1", qb)["max_dest_rd_atomic"], depth)

        before = self.stats()
        first = held[0][0]
        self.assertIn("duplicated", self.step("uroce0", "duplicate", str(first)))
        self.step("uroce0", "next", str(first))
        harness.wait_for(
            lambda: self.delta(before, self.stats(), "uroce1", "duplicate_request") == 1,
            5.0, "the duplicate at uroce1", self.daemon.log)
        self.step("uroce0", "run")
        lab.expect(r"^returned values: %s$" % " ".join(str(1000 + i) for i in range(burst)))
        lab.expect(r"^counter now %d$" % (1000 + burst))
        lab.finish()

    def test_max_rd_atomic_above_the_device_limit_is_refused(self):
        lab = self.lab("atomics.py", "--max-rd-atomic", "129")
        lab.proc.stdin.close()
        self.assertNotEqual(lab.proc.wait(30), 0)
        self.assertIn("Errno: 22", lab.stderr())


# --- Lab 8 -------------------------------------------------------------------------

class Lab08UdAddressHandlesMulticast(LabTestCase):

    def test_ibv_ud_pingpong(self):
        server, client = harness.run_pingpong(self.daemon.env(), "uroce1", "uroce0", 100, 1024,
                                              program="ibv_ud_pingpong", log=self.daemon.log)
        for side in (server, client):
            self.assertEqual(side.returncode, 0, side.output)
            self.assertIn("100 iters in ", side.output)

    def test_grh_qkey_and_drops(self):
        before = self.stats()
        output = self.run_lab("ud_address_handles.py")
        qa, qb = map(int, re.search(r"UD QPs: uroce0 QP (\d+), uroce1 QP (\d+)",
                                    output).groups())
        grh, size = 40, 100
        self.assertRegex(output, r"uroce1 completion: wr_id=100 status=IBV_WC_SUCCESS "
                                 r"opcode=IBV_WC_RECV byte_len=%d qp_num=%d src_qp=%d "
                                 r"flags=GRH" % (grh + size, qb, qa))
        self.assertIn("GRH: first 20 bytes all zero: True; then an IPv4 header, version 4, "
                      "protocol 17 (UDP), from 127.0.0.1 to 127.0.0.2", output)
        # The datagram with the wrong Q_Key left receive 101 for the next one.
        self.assertRegex(output, r"uroce1 completion: wr_id=101 status=IBV_WC_SUCCESS ")
        after = self.stats()
        self.assertEqual(self.delta(before, after, "uroce1", "rcvd_qkey_err"), 1)
        self.assertEqual(self.delta(before, after, "uroce1", "rcvd_msg_dropped"), 1)
        self.assertEqual(self.delta(before, after, "uroce0", "ud_oversize"), 1)
        self.assertEqual(self.delta(before, after, "uroce1", "rdma_recvs"), 2)
        for device, counter in (("uroce0", "rcvd_rnr_err"), ("uroce1", "send_rnr_err")):
            self.assertEqual(self.delta(before, after, device, counter), 0, "UD has no RNR")

    def test_mckey_delivers_to_every_member(self):
        mckey = harness.require_program("mckey")
        group, count = "239.1.2.3", 10
        receivers = []
        for address in ("127.0.0.2", "127.0.0.1"):
            receivers.append(subprocess.Popen(
                [mckey, "-m", group, "-b", address, "-C", str(count)], env=self.daemon.env(),
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                text=True))
            self.addCleanup(lambda p=receivers[-1]: p.poll() is None and (p.kill(), p.wait()))
        harness.wait_for(lambda: self.daemon.status().text.count("    multicast %s:" % group)
                         == 2, 15.0, "both receivers to join", self.daemon.log)
        status = self.daemon.status()
        self.assertEqual(sorted(c.device for c in status.clients
                                if c.pid in [r.pid for r in receivers]), ["uroce0", "uroce1"])
        stop_trace = self.start_trace("uroce1", "mckey.pcap")
        before = self.stats()
        sender = self.run_ok([mckey, "-m", group, "-b", "127.0.0.1", "-C", str(count), "-s"],
                             timeout=60)
        self.assertIn("joined dgid: ::ffff:%s" % group, sender.stdout)
        for receiver in receivers:
            output = receiver.communicate(timeout=30)[0]
            self.assertEqual(receiver.returncode, 0, output)
            self.assertIn("data transfers complete", output)
        # One copy of each datagram leaves uroce0, and each device with a
        # member receives it: the fabric (here the daemon) replicates.
        after = self.stats()
        self.assertEqual(self.delta(before, after, "uroce0", "sent_pkts"), count)
        self.assertEqual(self.delta(before, after, "uroce0", "rcvd_pkts"), count)
        self.assertEqual(self.delta(before, after, "uroce1", "rcvd_pkts"), count)
        received = self.tshark(stop_trace(), "ip.src", "ip.dst", "infiniband.bth.destqp")
        self.assertEqual(received, [("127.0.0.1", group, 0xFFFFFF)] * count)


# --- Lab 9 -------------------------------------------------------------------------

class Lab09Srq(LabTestCase):

    def test_ibv_srq_pingpong(self):
        server, client = harness.run_pingpong(self.daemon.env(), "uroce1", "uroce0", 100, 1024,
                                              program="ibv_srq_pingpong", log=self.daemon.log,
                                              extra_args=("-q", "4"))
        for side in (server, client):
            self.assertEqual(side.returncode, 0, side.output)
            self.assertIn("100 iters in ", side.output)

    def test_three_qps_share_one_srq_and_its_limit_event(self):
        lab = self.lab("srq.py", "--wait")
        m = lab.expect(r"^connected: uroce0 QPs \[([\d, ]+)\] -> uroce1 QPs \[([\d, ]+)\]")
        receivers = [int(n) for n in m.group(2).split(", ")]
        lab.paused()
        queues = [self.qp("uroce1", qpn)["receive_queue"] for qpn in receivers]
        self.assertEqual(len({json.dumps(q) for q in queues}), 1, queues)
        self.assertIn("srq", queues[0])
        lab.enter()
        posted, limit = 6, 3
        for i in range(4):
            m = lab.expect(r"^message %d from uroce0 QP \d+; uroce1 completion: wr_id=%d "
                           r"status=IBV_WC_SUCCESS opcode=IBV_WC_RECV byte_len=256 "
                           r"qp_num=(\d+)$" % (i, i))
            self.assertEqual(int(m.group(1)), receivers[i % len(receivers)])
            left = posted - i - 1
            lab.expect(r"^  %d receives left, srq_limit now %d$" % (
                left, limit if left >= limit else 0))
        lab.expect(r"^async event: 15 \(IBV_EVENT_SRQ_LIMIT_REACHED is 15\); srq_limit now 0$")
        lab.finish()


# --- Lab 10 ------------------------------------------------------------------------

class Lab10RdmaCm(LabTestCase):

    def test_rping_through_the_script(self):
        port = harness.free_tcp_port()
        count = 5
        for attempt in range(3):
            env = dict(self.daemon.env(), UROCE=self.tool, PORT=str(port), COUNT=str(count))
            result = harness.run_program([os.path.join(LABS, "rdma_cm.sh")], env=env,
                                         timeout=60, log=self.daemon.log)
            race = harness.rping_lost_its_exit_race(result.stdout + result.stderr, count)
            if result.returncode == 0 or not race or attempt == 2:
                break
            sys.stderr.write("rping: its client's CM thread lost the race to its exit; "
                             "once more\n")
            port = harness.free_tcp_port()
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        out = result.stdout
        self.assertRegex(out, r"  cm id \d+ pid \d+ tcp listen 127\.0\.0\.2:%d -> 0\.0\.0\.0:0 "
                              r"on uroce1 qp 0" % port)
        self.assertEqual(re.findall(r"^ping data: rdma-ping-(\d+):", out, re.M),
                         [str(i) for i in range(count)])
        before, after = [harness.parse_stats(block.strip("\n") + "\n") for block in
                         re.findall(r"== CM counters \w+\n(.*?)(?===|\Z)", out, re.S)]
        d = lambda device, counter: self.delta(before, after, device, counter)
        # One connection: REQ, REP, RTU to connect; DREQ, DREP to disconnect.
        self.assertEqual(d("uroce0", "cm_mads_sent") + d("uroce1", "cm_mads_sent"), 5)
        self.assertEqual(d("uroce0", "cm_mads_sent"), d("uroce1", "cm_mads_rcvd"))
        self.assertEqual(d("uroce1", "cm_mads_sent"), d("uroce0", "cm_mads_rcvd"))
        self.assertEqual(d("uroce0", "cm_mads_retried") + d("uroce1", "cm_mads_retried"), 0)

    def test_a_connection_as_status_and_qp_show_it(self):
        rping = harness.require_program("rping")
        port = harness.free_tcp_port()
        common = ["-a", "127.0.0.2", "-p", str(port)]  # no -C: pings until stopped
        procs = {}
        for role in ("-s", "-c"):
            procs[role] = subprocess.Popen([rping, role, *common], env=self.daemon.env(),
                                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL)
            self.addCleanup(lambda p=procs[role]: p.poll() is None and (p.kill(), p.wait()))
            if role == "-s":
                harness.wait_for(lambda: "tcp listen 127.0.0.2:%d " % port in
                                 self.daemon.status().text, 15.0, "rping to listen",
                                 self.daemon.log)
        pattern = (r"cm id \d+ pid (\d+) tcp connect cm established (\S+) -> (\S+) on (\w+) "
                   r"qp (\d+)")
        lines = harness.wait_for(
            lambda: len(found := re.findall(pattern, self.daemon.status().text)) == 2 and found,
            15.0, "both cm ids established", self.daemon.log)
        ids = {device: (int(pid), src, dst, int(qpn)) for pid, src, dst, device, qpn in lines}
        self.assertEqual(ids["uroce0"][0], procs["-c"].pid)
        self.assertEqual(ids["uroce1"][0], procs["-s"].pid)
        client, server = ids["uroce0"], ids["uroce1"]
        self.assertEqual((client[1], client[2]), (server[2], server[1]))
        self.assertEqual(ids["uroce1"][1], "127.0.0.2:%d" % port)
        client_qp = self.qp("uroce0", ids["uroce0"][3])
        self.assertEqual(client_qp["peer"], {"address": "127.0.0.2", "qpn": ids["uroce1"][3]})
        moves = [(t["from"], t["to"]) for t in client_qp["transitions"]]
        self.assertEqual(moves, [("RESET", "INIT"), ("INIT", "INIT"), ("INIT", "RTR"),
                                 ("RTR", "RTS")])
        # A client that dies is disconnected for it: the server hears of it.
        procs["-c"].kill()
        procs["-c"].wait()
        procs["-s"].wait(timeout=30)
        harness.wait_for(lambda: "cm id" not in self.daemon.status().text, 15.0,
                         "the cm ids to go", self.daemon.log)

    def test_ucmatose_and_rdma_server_client_as_the_lab_runs_them(self):
        # Their default ports: the daemon's port spaces are its own.
        for server_args, client_args, done in (
                (["ucmatose", "-b", "127.0.0.2"], ["ucmatose", "-s", "127.0.0.2"],
                 "test complete"),
                (["rdma_server"], ["rdma_client", "-s", "127.0.0.2"], "end 0")):
            with self.subTest(program=server_args[0]):
                server = subprocess.Popen(
                    [harness.require_program(server_args[0]), *server_args[1:]],
                    env=self.daemon.env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT, text=True)
                self.addCleanup(lambda p=server: p.poll() is None and (p.kill(), p.wait()))
                harness.wait_for(lambda: re.search(r"pid %d tcp listen " % server.pid,
                                                   self.daemon.status().text), 15.0,
                                 "%s to listen" % server_args[0], self.daemon.log)
                client = self.run_ok([harness.require_program(client_args[0]),
                                      *client_args[1:]], timeout=60)
                output = server.communicate(timeout=30)[0]
                self.assertEqual(server.returncode, 0, output)
                self.assertIn(done, output)
                self.assertIn(done, client.stdout)

    def test_the_connect_request_waits_on_a_paused_wire(self):
        rping = harness.require_program("rping")
        port = harness.free_tcp_port()
        common = ["-a", "127.0.0.2", "-p", str(port), "-C", "3"]
        server = subprocess.Popen([rping, "-s", *common], env=self.daemon.env(),
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
        self.addCleanup(lambda: server.poll() is None and (server.kill(), server.wait()))
        harness.wait_for(lambda: re.search(r"pid %d tcp listen 127\.0\.0\.2:%d " % (
            server.pid, port), self.daemon.status().text), 15.0, "rping to listen",
            self.daemon.log)
        self.pause_wire("uroce0")
        client = subprocess.Popen([rping, "-c", *common, "-V"], env=self.daemon.env(),
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
        self.addCleanup(lambda: client.poll() is None and (client.kill(), client.wait()))
        (_, request), = self.wait_held("uroce0", lambda h: h, "the connect request held")
        # MADs travel as UD datagrams to QP 1, the general services QP.
        self.assertRegex(request, r"^UD_SEND_ONLY psn \d+ to qp 1, ")
        self.assertRegex(self.daemon.status().text,
                         r"cm id \d+ pid %d tcp connect cm req-sent 127\.0\.0\.1:\d+ -> "
                         r"127\.0\.0\.2:%d on uroce0" % (client.pid, port))
        self.step("uroce0", "run")
        for side in (client, server):
            output = side.communicate(timeout=30)[0]
            self.assertEqual(side.returncode, 0, output)


if __name__ == "__main__":
    unittest.main()

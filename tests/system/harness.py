"""Shared pieces of the system tests.

- ``Daemon``: a private ``uroced`` in a temporary runtime directory, with the
  environment that child programs need to see its devices;
- ``parse_status``: the daemon's status text as data;
- ``RawClient``: the control protocol spoken byte by byte, for requests no
  well-behaved client would send;
- ``VerbsClient``: a pyverbs program in a child process, driven one command
  at a time (this file run as ``python3 harness.py verbs-client``);
- ``node_guid_for`` and friends: expected values derived from the rules in
  docs/uroced.md, never from the daemon's own output;
- ``counter_names`` and ``parse_stats``: the device counters of
  emulator/device/stats.h and the daemon's counter report;
- ``run_server_client``: a pair of programs that meet on a TCP port
  (ibv_rc_pingpong, perftest), server first;
- ``run_pingpong``: a pair of rdma-core pingpong examples, server and client.

Paths come from the environment that tests/system/CMakeLists.txt sets:
UROCED, UROCE_PROVIDER (the RDMAV_DRIVERS prefix), UROCE_BRIDGE,
UROCE_SANITIZER_PRELOAD (empty unless built with sanitizers) and, when the
command is built, UROCE_TOOL.
"""

import array
import ctypes
import dataclasses
import errno
import ipaddress
import itertools
import json
import os
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import unittest

# --- Control protocol ------------------------------------------------------
#
# The constants and the op numbering are read from the protocol's header,
# emulator/protocol/messages.h, so that the raw client speaks the protocol of
# the daemon under test. The header layouts are fixed:
#   RequestHeader {u32 magic; u16 version; u16 op; u32 length; u32 seq;}
#   ReplyHeader   {... ; i32 error; char message[kMaxErrorText];}

PROTOCOL_HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                               os.pardir, "emulator", "protocol", "messages.h")


def _read_protocol(path):
    with open(path) as f:
        text = f.read()
    constants = {}
    for name, value in re.findall(r"inline constexpr \w+ (k\w+) = ([0-9x* ]+);", text):
        number = 1
        for factor in value.split("*"):
            number *= int(factor.strip(), 0)
        constants[name] = number
    enum = re.search(r"enum class Op : uint16_t \{(.*?)\};", text, re.S)
    if not enum or not {"kMagic", "kVersion", "kMaxMessage", "kMaxFds", "kMaxErrorText",
                        "kNameLen"} <= constants.keys():
        raise RuntimeError("cannot read the protocol constants from " + path)
    ops, number = {}, 0
    for entry in re.sub(r"//.*", "", enum.group(1)).split(","):
        entry = entry.strip()
        if not entry:
            continue
        name, _, value = (part.strip() for part in entry.partition("="))
        number = int(value, 0) if value else number + 1
        ops[name] = number
    return constants, ops


_CONSTANTS, _OPS = _read_protocol(PROTOCOL_HEADER)
MAGIC = _CONSTANTS["kMagic"]
VERSION = _CONSTANTS["kVersion"]
MAX_MESSAGE = _CONSTANTS["kMaxMessage"]
MAX_FDS = _CONSTANTS["kMaxFds"]  # descriptors one message may carry
NAME_LEN = _CONSTANTS["kNameLen"]  # HelloRequest.device
REQUEST_HEADER = struct.Struct("<IHHII")  # magic, version, op, length, seq
REPLY_HEADER = struct.Struct("<IHHIIi%ds" % _CONSTANTS["kMaxErrorText"])  # ..., error, message
MAX_STATS_TEXT = _CONSTANTS["kMaxStatsText"]  # StatsReply.text
MAX_FAULT_DELAY_US = _CONSTANTS["kMaxFaultDelayUs"]
SET_FAULTS_REQUEST = struct.Struct("<%dsdddqQII" % NAME_LEN)  # device, drop, duplicate, reorder, delay, seed, seeded, replayed
TRACE_START_REQUEST = struct.Struct("<%dsII" % NAME_LEN)  # device, files, reserved
TRACE_PACKETS, TRACE_FAULTS = _CONSTANTS["kTracePackets"], _CONSTANTS["kTraceFaults"]
TRACE_REPLY = struct.Struct("<QIIQ")  # packets, write_failed, reserved, decisions


class Op:
    """Request ops, numbered as enum class rpc::Op numbers them."""

    HELLO = _OPS["kHello"]
    STATUS = _OPS["kStatus"]
    QUERY_DEVICE = _OPS["kQueryDevice"]
    QUERY_PORT = _OPS["kQueryPort"]
    ALLOC_PD = _OPS["kAllocPd"]
    STATS = _OPS["kStats"]
    SET_FAULTS = _OPS["kSetFaults"]
    TRACE_START = _OPS["kTraceStart"]
    COVERAGE = _OPS["kCoverage"]
    RESET = _OPS["kReset"]
    TRACE_STOP = _OPS["kTraceStop"]
    TRACE_QUERY = _OPS["kTraceQuery"]
    COUNT = _OPS["kCount"]  # the first number that is not an op


# --- Device counters (emulator/device/stats.h) ------------------------------

STATS_HEADER = os.path.join(os.path.dirname(PROTOCOL_HEADER), os.pardir, "device", "stats.h")


def counter_names():
    """The counter names of UROCE_DEVICE_COUNTERS, in the header's order."""
    return list(counter_descriptions())


def counter_descriptions():
    """{name: description} of UROCE_DEVICE_COUNTERS, as stats.h writes them,
    in the header's order."""
    with open(STATS_HEADER) as f:
        text = f.read()
    macro = re.search(r"#define UROCE_DEVICE_COUNTERS\(X\)(.*?)\n\n", text, re.S)
    pairs = re.findall(r'\bX\((\w+),\s*"((?:[^"\\]|\\.)*)"\)', macro.group(1)) if macro else []
    if not pairs:
        raise RuntimeError("cannot read the counter descriptions from " + STATS_HEADER)
    return {name: text.replace('\\"', '"') for name, text in pairs}


def parse_stats(text):
    """{device: {counter: value}} from the counter report, both in the
    daemon's order. Each device starts with its status header line."""
    device_re = re.compile(r"device (\S+) address \S+ node_guid \S+$")
    counter_re = re.compile(r"  (\w+) (\d+)$")
    stats, counters = {}, None
    for line in text.rstrip("\n").split("\n"):
        if m := device_re.match(line):
            counters = stats[m.group(1)] = {}
        elif counters is not None and (m := counter_re.match(line)):
            counters[m.group(1)] = int(m.group(2))
        else:
            raise ValueError("unexpected line %r in the counters:\n%s" % (line, text))
    return stats


# --- Values from libibverbs' verbs.h (stable ABI) -------------------------

IBV_PORT_ACTIVE = 4
IBV_MTU_4096 = 5
IBV_LINK_LAYER_ETHERNET = 2
IBV_QPS_INIT = 1
IBV_EVENT_DEVICE_FATAL = 8  # enum ibv_event_type

OBJECT_KINDS = ("pd", "mr", "mw", "cq", "qp", "srq", "wq", "rwq_ind_table", "ah", "xrcd",
                "comp_channel", "dm", "dm_bytes")

PYTHON = sys.executable  # the interpreter running the tests; it has pyverbs

START_TIMEOUT = 10.0
STOP_TIMEOUT = 10.0
RUN_TIMEOUT = 20.0


# --- Expected values from the documented rules -----------------------------

def node_guid_for(address):
    """The node GUID as an integer: the EUI-64 (RFC 4291 appendix A) of the
    locally administered MAC 02:00:a:b:c:d that stands for IPv4 a.b.c.d."""
    mac = bytes([0x02, 0x00]) + ipaddress.IPv4Address(address).packed
    eui = bytes([mac[0] ^ 0x02]) + mac[1:3] + b"\xff\xfe" + mac[3:6]
    return int.from_bytes(eui, "big")


def guid_hex(guid):
    """As ibv_devices prints it: 16 hex digits."""
    return "%016x" % guid


def guid_colon(guid):
    """As ibv_devinfo and sysfs print it: four groups of four hex digits."""
    text = guid_hex(guid)
    return ":".join(text[i:i + 4] for i in range(0, 16, 4))


def gid0_for(address):
    """GID 0 of a device: the IPv4-mapped IPv6 address, as inet_ntop writes it
    (RFC 5952 section 5: dotted quad after ::ffff:)."""
    return "::ffff:%s" % ipaddress.IPv4Address(address)


def gid0_groups_for(address):
    """GID 0 as eight 4-digit groups (sysfs, pyverbs). Built by hand: from
    Python 3.13 on, `exploded` writes an IPv4-mapped address's last 32 bits
    as a dotted quad."""
    packed = ipaddress.IPv6Address("::ffff:" + address).packed
    return ":".join(packed[i:i + 2].hex() for i in range(0, 16, 2))


DEFAULT_DEVICES = {"uroce0": "127.0.0.1", "uroce1": "127.0.0.2"}


# --- Locations -------------------------------------------------------------

def required_path(name):
    value = os.environ.get(name)
    if not value:
        raise unittest.SkipTest(
            "%s is not set; run the system tests through ctest (label 'system')" % name)
    return value


def provider_abi():
    """The private provider ABI (N of liburoce-rdmav<N>.so) of the build under test."""
    return re.search(r"-rdmav(\d+)\.so$", required_path("UROCE_PROVIDER_FILE")).group(1)


def uroced_path():
    return required_path("UROCED")


def tool_path():
    return os.environ.get("UROCE_TOOL") or None


def without_leak_check(env):
    """`env` with LeakSanitizer off, for a process whose leaks are not ours
    to judge (an interpreter, a stock program) or that runs under ptrace."""
    env["ASAN_OPTIONS"] = ":".join(filter(None, [env.get("ASAN_OPTIONS", ""), "detect_leaks=0"]))
    return env


def client_environment(runtime_dir, base=None):
    """What a program needs to use the devices of the daemon in runtime_dir
    (what `uroce env` gives, built here from the paths ctest passes)."""
    env = dict(os.environ if base is None else base)
    # Sanitizer builds: the runtimes must come before the sanitized bridge.
    sanitizers = os.environ.get("UROCE_SANITIZER_PRELOAD", "")
    if sanitizers:
        # Leaks of ibv_devinfo or the Python interpreter are not ours to judge.
        without_leak_check(env)
    env.update(
        SYSFS_PATH=os.path.join(runtime_dir, "sysfs"),
        RDMAV_DRIVERS=required_path("UROCE_PROVIDER"),
        LD_PRELOAD=":".join(filter(None, sanitizers.split(":") +
                                   [required_path("UROCE_BRIDGE")])),
        UROCE_RUNTIME_DIR=runtime_dir,
    )
    return env


def tool_environment(runtime_dir):
    """A user's environment (none of what `uroce env` sets) for the daemon in runtime_dir."""
    env = {name: value for name, value in os.environ.items()
           if name not in ("SYSFS_PATH", "LD_PRELOAD", "RDMAV_DRIVERS")}
    env["UROCE_RUNTIME_DIR"] = runtime_dir
    return env


def require_program(name):
    path = shutil.which(name)
    if not path:
        raise unittest.SkipTest("%s is not installed (ibverbs-utils)" % name)
    return path


def run_program(args, env, timeout=RUN_TIMEOUT, log=lambda: "", **kwargs):
    """Runs a program to completion with text output captured; fails the
    test (with `log`) when it does not finish in time."""
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env,
                              **kwargs)
    except subprocess.TimeoutExpired:
        raise AssertionError("%s did not finish in %.0f s\n%s" % (args, timeout, log()))


def rping_lost_its_exit_race(output, count):
    """rping's own race, on any device: its client never joins its CM
    thread, and closes the event channel while that thread may be on its
    way back to rdma_get_cm_event, which then fails with EBADF and exits 255
    after all `count` pings passed (rping.c in rdma-core v44). True when
    `output` (the client's, with anything else) shows exactly that."""
    return ("rdma_get_cm_event: Bad file descriptor" in output and
            re.search(r"^ping data: rdma-ping-%d:" % (count - 1), output, re.M) is not None)


# --- Polling ----------------------------------------------------------------

def wait_for(predicate, timeout, what, log=lambda: ""):
    """Polls predicate until it returns a true value, which is returned.
    On timeout fails with `what` and the daemon's log."""
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError("timed out after %.1f s waiting for %s\n%s" %
                                 (timeout, what, log()))
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


# --- Status text (emulator/control/server.cpp) -------------------------------

@dataclasses.dataclass
class DeviceStatus:
    name: str
    address: str
    node_guid: str
    port_state: str = ""
    max_mtu: int = 0
    active_mtu: int = 0
    link_layer: str = ""
    gids: dict = dataclasses.field(default_factory=dict)  # index -> (gid, type)
    objects: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class ClientStatus:
    pid: int
    uid: int
    device: str
    objects: dict


@dataclasses.dataclass
class Status:
    pid: int
    device_count: int
    devices: dict  # name -> DeviceStatus, in the daemon's order
    clients: list  # ClientStatus
    client_count: int
    text: str


def _parse_objects(text):
    objects = {}
    for item in text.split(","):
        kind, count = item.split()
        objects[kind] = int(count)
    return objects


class DescriptorRefusal(AssertionError):
    """The daemon refused a request for want of file descriptors (EMFILE)."""


def parse_status(text):
    """Parses the status report (emulator/control/server.cpp)."""
    header = re.compile(r"uroced pid (\d+), (\d+) devices?$")
    device_re = re.compile(r"device (\S+) address (\S+) node_guid (\S+)$")
    port_re = re.compile(r"  port 1 (\S+) max_mtu (\d+) active_mtu (\d+) link_layer (\S+)$")
    gid_re = re.compile(r"  gid (\d+) (\S+) (.+)$")
    objects_re = re.compile(r"  objects (.+)$")
    client_re = re.compile(r"client pid (\d+) uid (\d+) device (\S+) objects (.+)$")
    clients_re = re.compile(r"clients (\d+)$")
    lines = text.rstrip("\n").split("\n")
    m = header.match(lines[0])
    if not m:
        raise ValueError("status does not start with the daemon line:\n" + text)
    status = Status(int(m.group(1)), int(m.group(2)), {}, [], -1, text)
    device = None
    for line in lines[1:]:
        if m := device_re.match(line):
            device = DeviceStatus(m.group(1), m.group(2), m.group(3))
            status.devices[device.name] = device
        elif device and (m := port_re.match(line)):
            device.port_state, device.max_mtu, device.active_mtu, device.link_layer = (
                m.group(1), int(m.group(2)), int(m.group(3)), m.group(4))
        elif device and (m := gid_re.match(line)):
            device.gids[int(m.group(1))] = (m.group(2), m.group(3))
        elif device and (m := objects_re.match(line)):
            device.objects = _parse_objects(m.group(1))
        elif m := client_re.match(line):
            status.clients.append(ClientStatus(int(m.group(1)), int(m.group(2)), m.group(3),
                                               _parse_objects(m.group(4))))
            device = None
        elif m := clients_re.match(line):
            status.client_count = int(m.group(1))
            device = None
        # Other lines (details added later) are not what these tests check.
    if status.client_count < 0:
        raise ValueError("status has no 'clients N' line:\n" + text)
    return status


def zero_counts():
    return {kind: 0 for kind in OBJECT_KINDS}


def counts(**nonzero):
    """All object counts, zero except those given."""
    result = zero_counts()
    result.update(nonzero)
    return result


# --- Raw protocol client ------------------------------------------------------

@dataclasses.dataclass
class Reply:
    magic: int
    version: int
    op: int
    length: int
    seq: int
    error: int
    message: str
    body: bytes
    size: int  # bytes received


def request_bytes(op, body=b"", seq=1, magic=MAGIC, version=VERSION, length=None):
    """A request message; length defaults to the true size."""
    if length is None:
        length = REQUEST_HEADER.size + len(body)
    return REQUEST_HEADER.pack(magic, version, op, length, seq) + body


def device_body(device):
    """A device name as the requests carry it (char[kNameLen])."""
    return device.encode().ljust(NAME_LEN, b"\0")


def trace_start_body(device, files=None):
    """kTraceStart's body: the device and which files its descriptors are."""
    return TRACE_START_REQUEST.pack(device.encode(), TRACE_PACKETS if files is None else files, 0)


CASE_ID_LEN = _CONSTANTS["kCaseIdLen"]  # HelloRequest.case_id


# HelloRequest.memory (protocol/memory_access.h): where the daemon finds 8
# known bytes of this process, and what it did about Yama (0: nothing).
MEMORY_PROBE = struct.Struct("<QQiiq")  # address, value, ptracer, error, program_ptracer
_PROBE_BYTES = ctypes.c_uint64(0x7572_6f63_6570_726f)


def memory_probe(address=None, value=None):
    """A probe the daemon can read in this process, or one naming other bytes."""
    return MEMORY_PROBE.pack(ctypes.addressof(_PROBE_BYTES) if address is None else address,
                             _PROBE_BYTES.value if value is None else value, 0, 0, 0)


def hello_body(device, case_id="", probe=None):
    return (device_body(device) + case_id.encode().ljust(CASE_ID_LEN, b"\0") +
            (memory_probe() if probe is None else probe))


def set_faults_body(device, drop=0.0, duplicate=0.0, reorder=0.0, delay_us=0, seed=None,
                    replayed=0):
    return SET_FAULTS_REQUEST.pack(device.encode(), drop, duplicate, reorder, delay_us, seed or 0,
                                   seed is not None, replayed)


# What a sanitizer build of the daemon may hold beyond a plain one's memory
# (see Daemon.rss); the plain pass of the suite checks memory bounds exactly.
SANITIZER_MEMORY_SLACK = (128 << 20) if os.environ.get("UROCE_SANITIZER_PRELOAD") else 0


class RawClient:
    """One connection to the daemon's socket, speaking raw messages."""

    def __init__(self, socket_path, timeout=5.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.sock.settimeout(timeout)
            self.sock.connect(socket_path)
        except BaseException:
            self.sock.close()
            raise
        self.seq = 0

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, data, fds=()):
        if fds:
            self.sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                        array.array("i", fds))])
        else:
            self.sock.sendmsg([data])

    def receive(self):
        """The next reply; raises socket.timeout or ConnectionError."""
        data, ancdata, _, _ = self.sock.recvmsg(MAX_MESSAGE + 1, socket.CMSG_SPACE(64))
        for level, kind, payload in ancdata:  # close any descriptor sent back
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                for fd in array.array("i", payload[:len(payload) - len(payload) % 4]):
                    os.close(fd)
        if not data:
            raise ConnectionError("the daemon closed the connection")
        if len(data) < REPLY_HEADER.size:
            raise AssertionError("reply of %d bytes is shorter than a reply header" % len(data))
        magic, version, op, length, seq, error, message = REPLY_HEADER.unpack_from(data)
        return Reply(magic, version, op, length, seq, error,
                     message.split(b"\0", 1)[0].decode(errors="replace"),
                     data[REPLY_HEADER.size:], len(data))

    def call(self, op, body=b"", fds=(), **header):
        """Sends one request (header fields may be overridden) and returns its reply."""
        self.seq += 1
        header.setdefault("seq", self.seq)
        self.send(request_bytes(op, body, **header), fds)
        return self.receive()

    def hello(self, device="", with_event_pipe=None):
        """Says hello; a device connection carries the async event pipe's write end."""
        if with_event_pipe is None:
            with_event_pipe = bool(device)
        if not with_event_pipe:
            return self.call(Op.HELLO, hello_body(device))
        read_end, write_end = os.pipe()
        try:
            return self.call(Op.HELLO, hello_body(device), fds=[write_end])
        finally:
            os.close(write_end)
            os.close(read_end)

    def status_text(self):
        """The whole status report, read page by page (ReportRequest.offset,
        each reply a ReportReply.total and the page's text)."""
        text = b""
        while True:
            reply = self.call(Op.STATUS, struct.pack("<Q64sII", len(text), b"", 0, 0))
            if reply.error == errno.EMFILE:
                raise DescriptorRefusal(reply.message)
            if reply.error:
                raise AssertionError("status failed: %s (%s)" % (
                    os.strerror(reply.error), reply.message))
            total, = struct.unpack_from("<Q", reply.body)
            text += reply.body[8:]
            if len(text) >= total or len(reply.body) == 8:
                assert len(text) == total, (len(text), total)
                return text.decode()


# --- The daemon ------------------------------------------------------------------

_daemon_numbers = itertools.count(1)


def free_udp_port():
    """A UDP port that is free on the loopback addresses right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


class Daemon:
    """A private uroced. Its runtime directory and log live in a fresh
    temporary directory that is removed by cleanup()."""

    def __init__(self, args=(), base_dir=None, binary=None, own_port=True):
        self.binary = binary  # another uroced than the one built (a test build)
        self.base = base_dir or tempfile.mkdtemp(prefix="uroce-sys-")
        self.owns_base = base_dir is None
        self.runtime_dir = os.path.join(self.base, "run")
        self.log_path = os.path.join(self.base, "uroced-%d.log" % next(_daemon_numbers))
        # UROCE_DAEMON_ARGS: options for every test daemon, e.g. --paranoid to
        # run a suite with every invariant checked (docs/fuzzing.md).
        self.args = list(args) + os.environ.get("UROCE_DAEMON_ARGS", "").split()
        if "--udp-port" not in self.args and own_port:
            # Test daemons run side by side (ctest -j): one RoCEv2 port each
            # (own_port=False: the one the daemon chooses, as users get it).
            self.args += ["--udp-port", str(free_udp_port())]
        self.proc = None

    # Files in the runtime directory (docs/uroced.md).
    @property
    def socket_path(self):
        return os.path.join(self.runtime_dir, "uroced.sock")

    @property
    def pid_path(self):
        return os.path.join(self.runtime_dir, "uroced.pid")

    @property
    def sysfs_path(self):
        return os.path.join(self.runtime_dir, "sysfs")

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return "--- uroced log (%s) ---\n%s--- end of log ---" % (
                    self.log_path, f.read())
        except OSError:
            return "(no uroced log)"

    def launch(self, wrapper=()):
        """Starts the process (under `wrapper`, e.g. strace, when given)
        without waiting for it to be ready."""
        env = dict(os.environ)
        if wrapper:
            # LeakSanitizer cannot run under ptrace (sanitizer builds).
            without_leak_check(env)
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                [*wrapper, self.binary or uroced_path(), "--runtime-dir", self.runtime_dir,
                 *self.args],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env)
        finally:
            log.close()
        return self

    def start(self, wrapper=()):
        """Starts the daemon (under `wrapper` when given) and returns once it
        answers status and its device tree is published; fails with the log
        otherwise."""
        self.launch(wrapper)

        def ready():
            if self.proc.poll() is not None:
                raise AssertionError("uroced exited with status %d at start\n%s" % (
                    self.proc.returncode, self.log()))
            try:
                with RawClient(self.socket_path, timeout=1.0) as client:
                    client.status_text()
            except OSError:
                return False
            return os.path.isdir(os.path.join(self.sysfs_path, "class", "infiniband_verbs"))

        wait_for(ready, START_TIMEOUT, "uroced to answer on " + self.socket_path, self.log)
        return self

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig=signal.SIGTERM, timeout=STOP_TIMEOUT):
        """Signals the daemon and returns its exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.save_coverage()
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("uroced ignored signal %d for %.0f s\n%s" % (
                    sig, timeout, self.log()))
        return self.proc.returncode

    def save_coverage(self):
        """With UROCE_COVERAGE_OUT=DIR, the ids of the coverage map the
        daemon lit, one per line, into a file of DIR: tools/fuzz measures
        what the suite reaches from them."""
        out = os.environ.get("UROCE_COVERAGE_OUT")
        if not out or not tool_path():
            return
        result = subprocess.run([tool_path(), "coverage", "--json"], capture_output=True,
                                text=True, env=tool_environment(self.runtime_dir), timeout=30)
        if result.returncode == 0:
            lit = [entry["id"] for entry in json.loads(result.stdout)["entries"]
                   if entry["count"]]
            os.makedirs(out, exist_ok=True)
            with open(os.path.join(out, "%d-%s.ids" % (os.getpid(), os.path.basename(
                    self.log_path))), "w") as f:
                f.write("".join("%d\n" % i for i in lit))

    def cleanup(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.owns_base:
            shutil.rmtree(self.base, ignore_errors=True)

    def env(self, base=None):
        return client_environment(self.runtime_dir, base)

    def raw_client(self, timeout=5.0):
        return RawClient(self.socket_path, timeout)

    def status(self):
        with self.raw_client() as client:
            return parse_status(client.status_text())

    def stats_text(self):
        """The device counters as `uroce stats` prints them (see parse_stats)."""
        with self.raw_client() as client:
            reply = client.call(Op.STATS, device_body(""))
        if reply.error:
            raise AssertionError("stats failed: %s (%s)" % (
                os.strerror(reply.error), reply.message))
        return reply.body.split(b"\0", 1)[0].decode()

    def device_counts(self, device):
        return self.status().devices[device].objects

    def wait_for_counts(self, device, expected, timeout=5.0):
        """Polls status until the device's object counts equal `expected`."""
        last = {}

        def match():
            last["status"] = self.status()
            return last["status"].devices[device].objects == expected

        wait_for(match, timeout, "object counts of %s to become %s" % (device, expected),
                 lambda: "last status:\n%s\n%s" % (
                     last["status"].text if last else "", self.log()))

    def wait_until_idle(self, timeout=5.0):
        """Polls status until no program has a device open and no device has
        objects: what a test leaves once its clients are gone."""
        last = {}

        def idle():
            # Right after clients exit the daemon may not have closed their
            # descriptors yet, and refuses this one (EMFILE or a reset):
            # not idle yet.
            try:
                status = last["status"] = self.status()
            except (ConnectionError, DescriptorRefusal):
                return False
            return status.client_count == 0 and all(
                d.objects == zero_counts() for d in status.devices.values())

        wait_for(idle, timeout, "uroced to have no clients and no objects",
                 lambda: "last status:\n%s\n%s" % (
                     last["status"].text if last else "", self.log()))

    def run(self, args, timeout=RUN_TIMEOUT, **kwargs):
        """Runs a program with this daemon's environment; returns CompletedProcess."""
        kwargs.setdefault("env", self.env())
        return run_program(args, timeout=timeout, log=self.log, **kwargs)

    def rss(self):
        """The daemon's resident memory in bytes. Under AddressSanitizer
        freed memory waits in its quarantine (tools/test bounds it at 64 MiB)
        and shadow memory comes on top: compare growth with a bound plus
        SANITIZER_MEMORY_SLACK."""
        with open(self.pid_path) as f:
            pid = int(f.read())
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS for uroced")

    def assert_alive(self, test):
        """The daemon still runs and answers status."""
        test.assertTrue(self.running(), "uroced died\n" + self.log())
        self.status()


NOBODY = 65534
# A command run as nobody, as a second user of the machine (the suite runs as root).
AS_NOBODY = ["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups"]


class NobodysDaemon(Daemon):
    """A daemon started by nobody, from copies of the daemon, provider and
    bridge in a directory of nobody's (the build may be where nobody cannot
    read); env() reaches it with those copies."""

    def __init__(self, args=(), own_port=True):
        base = tempfile.mkdtemp(prefix="uroce-nobody-")
        os.chmod(base, 0o755)
        os.chown(base, NOBODY, NOBODY)
        self.kit = os.path.join(base, "kit")
        os.mkdir(self.kit)
        for path in (uroced_path(), required_path("UROCE_PROVIDER_FILE"),
                     required_path("UROCE_BRIDGE")):
            shutil.copy(path, self.kit)
        super().__init__(args, base_dir=base, binary=os.path.join(self.kit, "uroced"),
                         own_port=own_port)
        self.owns_base = True

    def start(self, wrapper=()):
        return super().start(wrapper=[*AS_NOBODY, *wrapper])

    def env(self, base=None):
        env = super().env(base)
        env.update(RDMAV_DRIVERS=os.path.join(self.kit, "liburoce"),
                   LD_PRELOAD=":".join(filter(None, [os.environ.get("UROCE_SANITIZER_PRELOAD"),
                                                     os.path.join(self.kit,
                                                                  "liburoce-bridge.so")])))
        return env


class DaemonTestCase(unittest.TestCase):
    """One private daemon for all tests of a class (started in setUpClass)."""

    daemon_args = ()

    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon(cls.daemon_args)
        try:
            cls.daemon.start()
        except BaseException:
            cls.daemon.cleanup()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            cls.daemon.stop()
        finally:
            cls.daemon.cleanup()

    def run_ok(self, args, **kwargs):
        """Runs a program in the daemon's environment and asserts it succeeds."""
        result = self.daemon.run(args, **kwargs)
        self.assertEqual(result.returncode, 0, "%s failed:\nstdout:\n%s\nstderr:\n%s\n%s" % (
            args, result.stdout, result.stderr, self.daemon.log()))
        return result


# --- Output of the rdma-core utilities -----------------------------------------

def parse_ibv_devices(text):
    """{device name: node GUID text} from `ibv_devices`."""
    devices = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) == 2 and re.fullmatch(r"[0-9a-f]{16}", words[1]):
            devices[words[0]] = words[1]
    return devices


def split_ibv_devinfo(text):
    """{hca_id: block of text} from `ibv_devinfo`."""
    blocks = {}
    for block in re.split(r"^(?=hca_id:)", text, flags=re.M):
        m = re.match(r"hca_id:\s*(\S+)", block)
        if m:
            blocks[m.group(1)] = block
    return blocks


def devinfo_field(block, name):
    """The value of `name:` in an ibv_devinfo block (first occurrence)."""
    m = re.search(r"^\s*%s:\s*(.*?)\s*$" % re.escape(name), block, flags=re.M)
    return m.group(1) if m else None


# --- ibv_rc_pingpong ------------------------------------------------------------

_PINGPONG_LOCAL = re.compile(
    r"^\s*local address:\s+LID 0x[0-9a-f]+, QPN 0x([0-9a-f]+), PSN 0x([0-9a-f]+)", re.M)


@dataclasses.dataclass
class PingPongSide:
    device: str
    returncode: int
    output: str  # stdout and stderr
    qpn: int  # its QP's number and initial PSN, as it printed them; None if it did not
    psn: int
    seconds: float = 0.0  # from its start to its exit


def free_tcp_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def tcp_port_listening(port, pid="self"):
    """Whether a socket listens on TCP `port` (IPv4 or IPv6) in the network
    namespace of process `pid`, seen without connecting to it (a connection
    would be taken for the peer's)."""
    for table in ("/proc/%s/net/tcp" % pid, "/proc/%s/net/tcp6" % pid):
        try:
            with open(table) as f:
                rows = [line.split() for line in f.readlines()[1:]]
        except OSError:
            continue
        if any(int(row[1].rsplit(":", 1)[1], 16) == port and row[3] == "0A" for row in rows):
            return True
    return False


@dataclasses.dataclass
class PairSide:
    args: list
    returncode: int  # negative: killed by that signal (the harness kills a side left waiting)
    output: str  # stdout and stderr
    seconds: float  # from its start to its exit


CONNECT_FAILED = "Couldn't connect"  # ibv_rc_pingpong's and perftest's client, connect() refused


def run_server_client(env, server_args, client_args, port, timeout=RUN_TIMEOUT, log=lambda: "",
                      connect_attempts=3, linger=10.0):
    """Runs a server program, then its client, the way a user runs a pair of
    rdma-core or perftest programs: the client starts once the server
    listens on TCP `port`, and starts again (up to `connect_attempts` times)
    when it could not connect while the server still waits. A server still
    running `linger` seconds after its client failed is killed. Returns
    (server, client) PairSide; fails the test when the pair does not finish
    in `timeout` seconds."""
    procs = {}

    def start(role, args):
        procs[role] = (subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True, env=env),
                       time.monotonic())

    def report(what):
        texts = {}
        for role, (proc, _) in procs.items():
            if proc.poll() is None:
                proc.kill()
            texts[role] = proc.communicate()[0]
        return "%s\nserver %s:\n%s\nclient %s:\n%s\n%s" % (
            what, server_args, texts.get("server", ""), client_args, texts.get("client", ""),
            log())

    deadline = time.monotonic() + timeout
    try:
        start("server", server_args)
        server = procs["server"][0]
        # The server's own table: it may run in another network namespace.
        wait_for(lambda: tcp_port_listening(port, server.pid) or server.poll() is not None, 10.0,
                 "%s to listen on TCP port %d" % (server_args[0], port), log)
        for attempt in range(connect_attempts):
            start("client", client_args)
            client, client_start = procs["client"]
            try:
                client_output = client.communicate(
                    timeout=max(0.1, deadline - time.monotonic()))[0]
            except subprocess.TimeoutExpired:
                raise AssertionError(report("the pair did not finish in %.0f s" % timeout))
            client_end = time.monotonic()
            if (client.returncode == 0 or CONNECT_FAILED not in client_output
                    or server.poll() is not None or attempt + 1 == connect_attempts):
                break
            time.sleep(0.2 * (attempt + 1))
        wait = deadline - time.monotonic()
        if client.returncode != 0:
            wait = min(wait, linger)
        try:
            server_output = server.communicate(timeout=max(0.1, wait))[0]
        except subprocess.TimeoutExpired:
            server.kill()
            server_output = server.communicate()[0]
            if client.returncode == 0:
                raise AssertionError(report("the server did not finish in %.0f s" % timeout))
        server_end = time.monotonic()
    finally:
        for proc, _ in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return (PairSide(list(server_args), server.returncode, server_output,
                     server_end - procs["server"][1]),
            PairSide(list(client_args), client.returncode, client_output,
                     client_end - client_start))


def run_pingpong(env, server_device, client_device, iters, size, program="ibv_rc_pingpong",
                 timeout=RUN_TIMEOUT, log=lambda: "", extra_args=()):
    """Runs a pingpong example's server (ibv_rc_pingpong, ibv_uc_pingpong,
    ...) on server_device and its client on client_device (GID index 0: RoCE
    v2), exchanging their addresses on a TCP port of their own; `extra_args`
    go to both (-e, -c, ...). Returns (server, client) PingPongSide; fails
    the test when they do not finish in `timeout` seconds."""
    program = require_program(program)
    port = free_tcp_port()
    common = ["-g", "0", "-n", str(iters), "-s", str(size), "-p", str(port), *extra_args]
    pair = run_server_client(env, [program, "-d", server_device, *common],
                             [program, "-d", client_device, *common, "127.0.0.1"], port,
                             timeout=timeout, log=log)
    sides = []
    for device, side in zip((server_device, client_device), pair):
        m = _PINGPONG_LOCAL.search(side.output)
        sides.append(PingPongSide(device, side.returncode, side.output,
                                  int(m.group(1), 16) if m else None,
                                  int(m.group(2), 16) if m else None, side.seconds))
    return tuple(sides)


# --- pyverbs client in a child process -----------------------------------------

def pyverbs_available():
    result = subprocess.run([PYTHON, "-c", "import pyverbs.device"],
                            capture_output=True, timeout=30)
    return result.returncode == 0


def require_pyverbs():
    if not pyverbs_available():
        raise unittest.SkipTest("%s has no pyverbs (python3-pyverbs)" % PYTHON)


class VerbsClient:
    """A child process that holds a pyverbs context and creates objects on
    command. Each call returns the child's JSON answer; {"ok": false} answers
    carry "error" and "errno"."""

    def __init__(self, daemon):
        self.daemon = daemon
        self.proc = subprocess.Popen(
            [PYTHON, os.path.abspath(__file__), "verbs-client"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=daemon.env())
        self.buffer = b""

    @property
    def pid(self):
        return self.proc.pid

    def _readline(self, timeout):
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise AssertionError("verbs client did not answer in %.0f s\n%s" % (
                    timeout, self.daemon.log()))
            chunk = os.read(fd, 65536)
            if not chunk:
                self.proc.wait(5)
                raise AssertionError("verbs client exited (%s):\n%s\n%s" % (
                    self.proc.returncode, self.proc.stderr.read().decode(errors="replace"),
                    self.daemon.log()))
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def call(self, *command, timeout=10.0):
        self.proc.stdin.write(json.dumps(command).encode() + b"\n")
        self.proc.stdin.flush()
        return self._readline(timeout)

    def must(self, *command):
        """call() that fails the test when the child reports an error."""
        answer = self.call(*command)
        if not answer.get("ok"):
            raise AssertionError("verbs client %s failed: %s\n%s" % (
                command, answer, self.daemon.log()))
        return answer

    def kill(self):
        self.proc.kill()
        self.proc.wait(10)

    def close(self):
        try:
            self.proc.stdin.close()  # end of commands: the child exits
        except OSError:
            pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            stream.close()


def _verbs_client_main():
    """The child side of VerbsClient: one JSON command per line on stdin."""
    from pyverbs_enums import e
    from pyverbs.cq import CQ, CompChannel
    from pyverbs.device import Context
    from pyverbs.mr import MR
    from pyverbs.pd import PD
    from pyverbs.pyverbs_error import PyverbsRDMAError
    from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
    from pyverbs.srq import SRQ, SrqAttr, SrqInitAttr

    state = {"ctx": None, "objects": []}

    def keep(obj):
        state["objects"].append(obj)
        return obj

    def last(kind):
        for obj in reversed(state["objects"]):
            if isinstance(obj, kind):
                return obj
        raise LookupError("no %s yet" % kind.__name__)

    def be64_to_int(value):
        # pyverbs hands out __be64 fields as the host integer of those bytes.
        return int.from_bytes(value.to_bytes(8, sys.byteorder), "big")

    def run(command, *args):
        ctx = state["ctx"]
        if command == "open":
            state["ctx"] = Context(name=args[0])
            return {}
        if command == "query":
            dev = ctx.query_device()
            port = ctx.query_port(1)
            return {"node_guid": be64_to_int(dev.node_guid),
                    "phys_port_cnt": dev.phys_port_cnt,
                    "port_state": port.state, "max_mtu": port.max_mtu,
                    "active_mtu": port.active_mtu, "link_layer": port.link_layer,
                    "gid0": str(ctx.query_gid(1, 0))}
        if command == "pd":
            keep(PD(ctx))
            return {}
        if command == "mr":
            mr = keep(MR(last(PD), 4096, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ))
            return {"lkey": mr.lkey, "rkey": mr.rkey}
        if command == "comp_channel":
            keep(CompChannel(ctx))
            return {}
        if command == "cq":
            channel = last(CompChannel) if args and args[0] == "with_channel" else None
            keep(CQ(ctx, 16, None, channel, 0))
            return {}
        if command == "srq":
            keep(SRQ(last(PD), SrqInitAttr(SrqAttr(max_wr=16, max_sge=1))))
            return {}
        if command == "qp":
            cq = last(CQ)
            attr = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq,
                              cap=QPCap(max_send_wr=8, max_recv_wr=8))
            qp = keep(QP(last(PD), attr))
            return {"qp_num": qp.qp_num, "state": qp.query(e.IBV_QP_STATE)[0].qp_state}
        if command == "qp_to_init":
            qp = last(QP)
            qp.to_init(QPAttr(port_num=1))
            return {"state": qp.query(e.IBV_QP_STATE)[0].qp_state}
        if command == "async_event":  # waits for the next one and acknowledges it
            event = ctx.get_async_event()
            event.ack()
            return {"event_type": event.event_type}
        if command == "close":
            ctx.close()  # closes every object made on it, in order
            state["objects"].clear()
            state["ctx"] = None
            return {}
        raise ValueError("unknown command %r" % command)

    for line in sys.stdin:
        command = json.loads(line)
        try:
            answer = {"ok": True, **run(*command)}
        except PyverbsRDMAError as error:
            answer = {"ok": False, "error": str(error), "errno": error.error_code}
        except Exception as error:  # reported to the test, which fails on it
            answer = {"ok": False, "error": "%s: %s" % (type(error).__name__, error),
                      "errno": None}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    if sys.argv[1:] == ["verbs-client"]:
        _verbs_client_main()
    else:
        sys.exit("usage: harness.py verbs-client")

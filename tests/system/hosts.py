"""Several hosts on one machine: network namespaces joined by a veth pair
(two hosts) or by a bridge (any number), with one uroced in each, as
machines on one Ethernet segment would be (docs/multi-host.md).

Each host's interface is eth0 with the address 10.77.0.<n>/24; its device
is uroce_<tag><letter> (device nodes are named by device, and tests run
side by side) on that address, or, in a fabric of family "ipv6", on
fd00:77::<n>/64 beside it (dual-stack hosts: programs that exchange their
QP numbers over TCP listen on IPv4 only, as ibv_rc_pingpong does); or, with
`on_interface`, made on eth0 itself (`--device NAME=eth0`), its GID table
following eth0's addresses. Namespaces need root: the suite runs as root
(README).
"""

import itertools
import os
import re
import shutil
import signal
import subprocess
import tempfile

import harness

SUBNET = "10.77.0."
SUBNET6 = "fd00:77::"
ROCE_PORT = "4791"  # every host has a network of its own: the standard port
_fabric_numbers = itertools.count()


def ip(*args):
    """Runs ip(8); a failure fails the test with what ip said."""
    result = subprocess.run(["ip", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, timeout=30)
    if result.returncode != 0:
        hint = "" if os.geteuid() == 0 else " (network namespaces need root)"
        raise AssertionError("ip %s failed%s:\n%s" % (" ".join(args), hint, result.stdout))
    return result.stdout


class Host:
    """A network namespace with eth0, an address and a uroced."""

    def __init__(self, netns, letter, address, device, control_address=None,
                 on_interface=False):
        self.netns = netns
        self.letter = letter
        self.address = address  # the device's
        self.control_address = control_address or address  # IPv4, for TCP side channels
        self.device = device
        self.interface = "eth0"
        self.on_interface = on_interface
        self.daemon = harness.Daemon([
            "--device", "%s=%s" % (device, self.interface if on_interface else address),
            "--udp-port", ROCE_PORT])

    def command(self, args):
        """`args` run in this host's namespace with its daemon's environment
        (the rest of the environment is the caller's)."""
        variables = {name: value for name, value in self.daemon.env().items()
                     if os.environ.get(name) != value}
        return ["ip", "netns", "exec", self.netns, "env",
                *("%s=%s" % item for item in sorted(variables.items())), *args]

    def run(self, args, timeout=harness.RUN_TIMEOUT):
        return subprocess.run(self.command(args), stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=timeout)

    def popen(self, args, **kwargs):
        return subprocess.Popen(self.command(args), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                **kwargs)

    def link(self, *words):
        """ip link set eth0 WORDS... in this host."""
        ip("-n", self.netns, "link", "set", self.interface, *words)

    def port(self):
        """{field: value} of `ibv_devinfo -v` for this host's device."""
        result = self.run([harness.require_program("ibv_devinfo"), "-v", "-d", self.device])
        if result.returncode != 0:
            raise AssertionError("ibv_devinfo failed:\n%s\n%s" % (result.stdout, self.daemon.log()))
        return {name: harness.devinfo_field(result.stdout, name)
                for name in ("state", "max_mtu", "active_mtu", "phys_state")}

    def gids(self):
        """{index: GID} of the device's non-empty GID entries (ibv_devinfo -v)."""
        result = self.run([harness.require_program("ibv_devinfo"), "-v", "-d", self.device])
        if result.returncode != 0:
            raise AssertionError("ibv_devinfo failed:\n%s\n%s" % (result.stdout, self.daemon.log()))
        return {int(index): gid for index, gid in
                re.findall(r"GID\[\s*(\d+)\]:\s+(\S+), RoCE v2", result.stdout)}

    def addresses(self, *options):
        """eth0's addresses `ip addr show` lists with `options` (scope link, ...)."""
        shown = ip("-n", self.netns, "-o", "addr", "show", "dev", self.interface, *options)
        return re.findall(r"inet6? ([0-9a-f.:]+)/", shown)

    def counter(self, name):
        return harness.parse_stats(self.daemon.stats_text())[self.device][name]

    def cm_listening(self, port):
        """Whether an rdma_cm ID of this host listens on `port`."""
        pattern = re.compile(r"^  cm id \d+ pid \d+ \w+ listen \S+:%d " % port)
        return any(pattern.match(line) for line in self.daemon.status().text.split("\n"))


class AsyncWatch:
    """ibv_asyncwatch on `host`'s device, once it has the device open;
    stop() ends it and returns what it printed, and `events` holds the
    (event name, port) pairs it reported."""

    def __init__(self, host, log):
        self.process = host.popen([harness.require_program("ibv_asyncwatch"), "-d", host.device])
        self.events = []
        try:
            harness.wait_for(lambda: len(host.daemon.status().clients) == 1, 10.0,
                             "ibv_asyncwatch to open the device", log)
        except BaseException:
            self.stop()
            raise

    def stop(self):
        self.process.terminate()
        output = self.process.communicate(timeout=10)[0]
        self.events = re.findall(r"event_type (IBV_EVENT_\w+) \(\d+\), port (\d+)", output)
        return output


class Fabric:
    """`count` hosts, joined by a veth pair (two hosts) or by a bridge in a
    namespace of its own, every link at `mtu` bytes."""

    def __init__(self, count=2, mtu=1500, bridge=False, family="ipv4", on_interface=False):
        tag = "%d%d" % (os.getpid() % 100000, next(_fabric_numbers))
        self.prefix = "uroce-%s-" % tag
        self.bridge = self.prefix + "br" if bridge or count != 2 else None
        self.family = family
        self.hosts = [Host(self.prefix + letter, letter,
                           (SUBNET6 if family == "ipv6" else SUBNET) + str(n + 1),
                           "uroce_%s%s" % (tag, letter), SUBNET + str(n + 1), on_interface)
                      for n, letter in enumerate("abcdefgh"[:count])]
        self.mtu = mtu

    def start(self):
        try:
            self._build()
            for host in self.hosts:
                host.daemon.start(wrapper=["ip", "netns", "exec", host.netns])
            # A veth has carrier a moment after it is up.
            for host in self.hosts:
                harness.wait_for(lambda: "PORT_ACTIVE" in host.port()["state"], 10.0,
                                 "%s's port to be active" % host.device, self.log)
            # A device made on eth0 follows its addresses, and eth0's IPv6
            # link-local one comes after duplicate address detection, a
            # second or two later: tests that watch for IBV_EVENT_GID_CHANGE
            # start once it has its GID.
            for host in (h for h in self.hosts if h.on_interface):
                harness.wait_for(lambda: host.addresses("scope", "link") and
                                 set(host.addresses("scope", "link")) <= set(host.gids().values()),
                                 10.0, "%s's GID table to take the link-local address" %
                                 host.device, self.log)
        except BaseException:
            self.close()
            raise
        return self

    def _build(self):
        for host in self.hosts:
            ip("netns", "add", host.netns)
            ip("-n", host.netns, "link", "set", "lo", "up")
        if self.bridge:
            ip("netns", "add", self.bridge)
            ip("-n", self.bridge, "link", "add", "br0", "type", "bridge")
            ip("-n", self.bridge, "link", "set", "br0", "mtu", str(self.mtu), "up")
            for host in self.hosts:
                port = "to-" + host.letter
                ip("link", "add", "eth0", "netns", host.netns, "type", "veth",
                   "peer", "name", port, "netns", self.bridge)
                ip("-n", self.bridge, "link", "set", port, "mtu", str(self.mtu), "master", "br0",
                   "up")
        else:
            a, b = self.hosts
            ip("link", "add", "eth0", "netns", a.netns, "type", "veth",
               "peer", "name", "eth0", "netns", b.netns)
        for host in self.hosts:
            ip("-n", host.netns, "addr", "add", host.control_address + "/24", "dev", "eth0")
            if self.family == "ipv6":
                # nodad: usable at once, not after duplicate address detection.
                ip("-n", host.netns, "addr", "add", host.address + "/64", "dev", "eth0", "nodad")
            host.link("mtu", str(self.mtu), "up")

    def close(self):
        for host in self.hosts:
            try:
                host.daemon.stop()
            finally:
                host.daemon.cleanup()
        for netns in [h.netns for h in self.hosts] + ([self.bridge] if self.bridge else []):
            subprocess.run(["ip", "netns", "del", netns], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)

    def set_mtu(self, mtu):
        """Every link of the fabric at `mtu` bytes (the bridge's ports first)."""
        if self.bridge:
            for host in self.hosts:
                ip("-n", self.bridge, "link", "set", "to-" + host.letter, "mtu", str(mtu))
            ip("-n", self.bridge, "link", "set", "br0", "mtu", str(mtu))
        for host in self.hosts:
            host.link("mtu", str(mtu))
        self.mtu = mtu

    def log(self):
        return "\n".join(host.daemon.log() for host in self.hosts)


def mckey_to_members(test, fabric, group, members, sender, while_joined=lambda host: None):
    """mckey as a user runs it: a receiver on each host of `members` joins
    `group` and waits for 10 datagrams, the sender on `sender` sends them
    (multicast_to_members)."""
    mckey = harness.require_program("mckey")
    multicast_to_members(test, fabric, group, members, sender,
                         lambda host: [mckey, "-m", group, "-b", host.address, "-C", "10"],
                         lambda host: [mckey, "-m", group, "-b", host.address, "-s", "-C", "10"],
                         "data transfers complete", while_joined)


def multicast_to_members(test, fabric, group, members, sender, receiver_args, sender_args,
                         finished, while_joined=lambda host: None):
    """A receiver (`receiver_args(host)`) on each host of `members` joins
    `group`; once each receiver's QP is attached (its device lists the
    group in `uroce status`; `while_joined(host)` looks at the host then),
    the sender (`sender_args(sender)`) sends. Asserts that the sender and
    every receiver exit 0, each receiver having printed `finished`."""
    receivers = [host.popen(receiver_args(host)) for host in members]
    try:
        for host in members:
            harness.wait_for(lambda: re.search(r"  multicast groups \d+ .*%s" % re.escape(group),
                                               host.daemon.status().text),
                             10.0, "%s's receiver to attach its QP" % host.device, fabric.log)
            while_joined(host)
        sent = sender.run(sender_args(sender), timeout=30)
        test.assertEqual(sent.returncode, 0, sent.stdout)
        for host, receiver in zip(members, receivers):
            output = receiver.communicate(timeout=20)[0]
            test.assertEqual(receiver.returncode, 0, "%s's receiver:\n%s\n%s" % (
                host.device, output, fabric.log()))
            test.assertIn(finished, output)
    finally:
        for receiver in receivers:
            if receiver.poll() is None:
                receiver.kill()
                receiver.communicate()


def mtu_of(field):
    """4096 from ibv_devinfo's '4096 (5)'."""
    return int(re.match(r"(\d+)", field).group(1))


def traced_fields(test, fabric, host, action, *fields):
    """`host`'s device traced (`uroce trace --pcap`) while `action()` runs;
    the trace read back by tshark: one list of `fields` per packet."""
    home = tempfile.mkdtemp(prefix="uroce-trace-")
    test.addCleanup(shutil.rmtree, home, True)
    pcap = os.path.join(home, "trace.pcap")
    trace = host.popen([harness.tool_path(), "trace", host.device, "--pcap", pcap])
    try:
        harness.wait_for(lambda: "  tracing (" in host.daemon.status().text, 10.0,
                         "the trace to start", fabric.log)
        action()
    finally:
        trace.send_signal(signal.SIGINT)
        output = trace.communicate(timeout=10)[0]
    test.assertEqual(trace.returncode, 0, output)
    result = subprocess.run(
        [harness.require_program("tshark"), "-r", pcap, "-T", "fields",
         *(word for field in fields for word in ("-e", field))],
        env=dict(os.environ, HOME=home), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, timeout=60)
    test.assertEqual(result.returncode, 0, result.stderr)
    return [line.split("\t") for line in result.stdout.splitlines()]

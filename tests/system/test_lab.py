"""The lab's views of a running device (docs/uroce.md `uroce qp`): every QP
of a real perftest pair, its state, peer and PSNs as they move; one QP in
full with the transitions it took; the JSON that scripts read; the view
redrawn in a terminal until `q`; and the refusals, each with its exit
status and reason."""

import fcntl
import json
import os
import pty
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import termios
import time
import unittest

import harness

EXIT_FAILURE = 1
EXIT_USAGE = 2
PSN_SPACE = 1 << 24


def psn_advance(before, after):
    return (after - before) % PSN_SPACE


class LabTestCase(harness.DaemonTestCase):

    def setUp(self):
        self.tool = harness.tool_path()
        if not self.tool:
            self.fail("the uroce command is not built (UROCE_TOOL is not set)")
        self.env = harness.tool_environment(self.daemon.runtime_dir)

    def uroce(self, *args, timeout=harness.RUN_TIMEOUT):
        return harness.run_program([self.tool, *args], env=self.env, timeout=timeout,
                                   log=self.daemon.log)

    def assert_exit(self, result, code, stderr_has=None):
        self.assertEqual(result.returncode, code, "uroce exited %d, expected %d:\n%s%s\n%s" % (
            result.returncode, code, result.stdout, result.stderr, self.daemon.log()))
        if stderr_has is not None:
            self.assertIn(stderr_has, result.stderr)

    def qps(self, *selection):
        result = self.uroce("qp", *selection, "--json")
        self.assert_exit(result, 0)
        return json.loads(result.stdout)["qps"]

    def start_write_bw(self, seconds):
        """ib_write_bw for `seconds` from uroce1 to uroce0; returns (server, client)
        once both QPs are in RTS and RTR or later."""
        program = harness.require_program("ib_write_bw")
        port = harness.free_tcp_port()
        common = ["-x", "0", "-p", str(port), "-D", str(seconds), "-s", "4096"]
        procs = []

        def start(args):
            procs.append(subprocess.Popen(args, env=self.daemon.env(), stdin=subprocess.DEVNULL,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          text=True))
            self.addCleanup(self.finish, procs[-1])

        start([program, "-d", "uroce0", *common])
        harness.wait_for(lambda: harness.tcp_port_listening(port), 10.0,
                         "ib_write_bw to listen", self.daemon.log)
        start([program, "-d", "uroce1", *common, "localhost"])
        harness.wait_for(lambda: sorted((q["device"], q["state"]) for q in self.qps())[1:] ==
                         [("uroce1", "RTS")], 20.0, "both perftest QPs", self.daemon.log)
        return procs

    @staticmethod
    def finish(proc):
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


class QpViewTest(LabTestCase):

    def test_perftest_qps_are_listed_with_their_peers_and_moving_psns(self):
        server, client = self.start_write_bw(6)
        first = {q["device"]: q for q in self.qps()}
        time.sleep(0.5)
        second = {q["device"]: q for q in self.qps()}
        self.assertEqual(set(first), {"uroce0", "uroce1"}, first)
        writer, target = second["uroce1"], second["uroce0"]
        self.assertEqual(writer["pid"], client.pid)
        self.assertEqual(target["pid"], server.pid)
        self.assertEqual(writer["comm"], "ib_write_bw")
        self.assertEqual((writer["type"], writer["state"], writer["previous_state"]),
                         ("RC", "RTS", "RTR"))
        # perftest's server never sends: it stays in RTR... or RTS when it moves on.
        self.assertIn(target["state"], ("RTR", "RTS"))
        self.assertEqual(writer["peer"], {"address": "127.0.0.1", "qpn": target["qpn"]})
        self.assertEqual(target["peer"], {"address": "127.0.0.2", "qpn": writer["qpn"]})
        self.assertEqual(writer["path_mtu"], target["path_mtu"])
        sent = psn_advance(first["uroce1"]["sq_psn"], writer["sq_psn"])
        received = psn_advance(first["uroce0"]["expected_psn"], target["expected_psn"])
        self.assertGreater(sent, 0, "the writer's PSN did not move")
        self.assertGreater(received, 0, "the target's expected PSN did not move")
        # What the target expects next never runs ahead of what was sent.
        self.assertLessEqual(psn_advance(target["expected_psn"], writer["sq_psn"]),
                             writer["unacked"]["count"] + 128)
        self.assertLessEqual(writer["unacked"]["count"], 128)
        self.assertGreater(writer["send_queue"]["completed"],
                           first["uroce1"]["send_queue"]["completed"])

        table = self.uroce("qp")
        self.assert_exit(table, 0)
        lines = table.stdout.splitlines()
        self.assertTrue(lines[0].startswith("DEVICE"), lines)
        rows = {line.split()[0]: line.split() for line in lines[1:]}
        self.assertEqual(rows["uroce1"][1:5], [str(writer["qpn"]), "RC", "RTS<RTR",
                                               str(client.pid)])
        self.assertIn("127.0.0.1/%d" % target["qpn"], rows["uroce1"])
        only = self.uroce("qp", "uroce0")
        self.assertEqual([line.split()[0] for line in only.stdout.splitlines()[1:]], ["uroce0"])

    def test_one_qp_shows_every_transition_it_took(self):
        server, client = self.start_write_bw(3)
        writer = next(q for q in self.qps() if q["device"] == "uroce1")
        result = self.uroce("qp", "uroce1", hex(writer["qpn"]))
        self.assert_exit(result, 0)
        text = result.stdout
        self.assertIn("state:                RTS<RTR", text)
        self.assertIn("peer:                 127.0.0.1/", text)
        moves = [line.split()[2:5] for line in text.splitlines() if line.startswith("  ")
                 and " -> " in line]
        self.assertEqual([m for m in moves if m[0] != m[2]][-3:],
                         [["RESET", "->", "INIT"], ["INIT", "->", "RTR"], ["RTR", "->", "RTS"]],
                         text)
        self.assertIn("IBV_QP_PATH_MTU", text)
        self.assertEqual(self.qps("uroce1", str(writer["qpn"]))[0]["qpn"], writer["qpn"])

    def test_refusals_name_what_is_wrong(self):
        self.assert_exit(self.uroce("qp", "uroce7"), EXIT_FAILURE, "no device named uroce7")
        self.assert_exit(self.uroce("qp", "uroce0", "4242"), EXIT_FAILURE,
                         "uroce0 has no QP 4242")
        self.assert_exit(self.uroce("qp", "uroce0", "seventeen"), EXIT_USAGE,
                         "'seventeen' is not a QP number")
        self.assert_exit(self.uroce("qp", "--json", "--watch"), EXIT_USAGE,
                         "--json and --watch do not go together")
        self.assert_exit(self.uroce("qp", "--watch"), EXIT_FAILURE, "needs a terminal")
        harness.wait_for(lambda: self.qps() == [], 10.0, "the QPs of earlier tests to go",
                         self.daemon.log)
        self.assertEqual(self.uroce("qp").stdout.splitlines()[1:], [])

    def test_watch_redraws_in_a_terminal_until_q(self):
        server, client = self.start_write_bw(5)
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 220, 0, 0))
        env = dict(self.env, TERM="xterm")
        watch = subprocess.Popen([self.tool, "qp", "--watch", "--interval", "0.2"], env=env,
                                 stdin=slave, stdout=slave, stderr=slave, close_fds=True)
        os.close(slave)
        self.addCleanup(os.close, master)
        self.addCleanup(self.finish_watch, watch)
        def read_for(seconds, until=None):
            data = b""
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline and not (until and until in data):
                if select.select([master], [], [], 0.2)[0]:
                    data += os.read(master, 65536)
            return data

        screen = read_for(10, until=b"RTS<RTR")
        self.assertIn(b"uroce qp: 2 QPs", screen, screen[-2000:])
        self.assertIn(b"RTS<RTR", screen)
        # curses redraws only what changed: the PSNs of the running pair do.
        self.assertGreater(len(read_for(1.0)), 0, "the view was not redrawn")
        os.write(master, b"q")
        self.assertEqual(watch.wait(timeout=5), 0)

    @staticmethod
    def finish_watch(proc):
        if proc.poll() is None:
            proc.kill()
            proc.wait()


class StepModeTest(LabTestCase):
    """`uroce step` on a real ib_send_lat pair: a paused wire holds the
    client's packets (its requests and its ACKs) while both programs wait;
    each `next` lets exactly one reach the other device; a dropped packet
    comes back as the requester's retransmission; a duplicated one reaches
    the responder twice; `run` lets the pair finish."""

    def counters(self, device):
        result = self.uroce("stats", device)
        self.assert_exit(result, 0)
        return harness.parse_stats(result.stdout)[device]

    def held(self, device):
        result = self.uroce("step", device)
        self.assert_exit(result, 0)
        lines = result.stdout.splitlines()
        self.assertRegex(lines[0], r"^%s: wire (paused|running), %d packets held$" % (
            device, len(lines) - 1))
        return [(int(line.split()[0]), line.split(None, 3)[3]) for line in lines[1:]]

    def wait_held(self, device, count=1):
        return harness.wait_for(lambda: len(self.held(device)) >= count and self.held(device),
                                15.0, "%d packets held on %s" % (count, device), self.daemon.log)

    def wait_send(self, device, psn=None):
        """The first SEND held on `device` (with PSN `psn`, if given)."""
        def find():
            return next(((i, text) for i, text in self.held(device)
                         if text.startswith("RC_SEND_ONLY") and psn in (None, text.split()[2])),
                        None)
        return harness.wait_for(find, 15.0, "a SEND%s held on %s" % (
            " with PSN %s" % psn if psn else "", device), self.daemon.log)

    def step(self, device, *action):
        result = self.uroce("step", device, *action)
        self.assert_exit(result, 0)
        return result.stdout

    def test_packets_cross_a_paused_wire_one_step_at_a_time(self):
        program = harness.require_program("ib_send_lat")
        port = harness.free_tcp_port()
        # A retransmission timeout of about 4 s (4.096 us * 2^20): the
        # steps below happen between the requester's retries, and its 7
        # retries last the test.
        common = ["-x", "0", "-p", str(port), "-n", "5", "-s", "64", "-u", "20"]
        self.addCleanup(self.step, "uroce0", "run")
        self.assertEqual(self.step("uroce0", "pause"), "uroce0: wire paused, 0 held\n")
        server = subprocess.Popen([program, "-d", "uroce1", *common], env=self.daemon.env(),
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
        self.addCleanup(self.finish, server)
        harness.wait_for(lambda: harness.tcp_port_listening(port), 10.0, "ib_send_lat to listen",
                         self.daemon.log)
        client = subprocess.Popen([program, "-d", "uroce0", *common, "localhost"],
                                  env=self.daemon.env(), stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.addCleanup(self.finish, client)

        first_id, first = self.wait_held("uroce0")[0]
        self.assertRegex(first, r"^RC_SEND_ONLY psn \d+ to qp \d+, 64 B payload")
        before = self.counters("uroce1")
        out = self.step("uroce0", "next")
        self.assertTrue(out.startswith("uroce0: packet %d released: RC_SEND_ONLY" % first_id), out)
        harness.wait_for(lambda: self.counters("uroce1")["rcvd_pkts"] > before["rcvd_pkts"], 5.0,
                         "the released packet to arrive", self.daemon.log)
        time.sleep(0.3)
        self.assertEqual(self.counters("uroce1")["rcvd_pkts"], before["rcvd_pkts"] + 1,
                         "one step let more than one packet through")

        # The client's next SEND (behind uroce0's ACK of the server's
        # answer): lose it; the requester sends it again when its timer fires.
        faults = self.counters("uroce0")
        victim_id, victim = self.wait_send("uroce0")
        self.assertIn("uroce0: packet %d dropped" % victim_id,
                      self.step("uroce0", "drop", str(victim_id)))
        psn = victim.split()[2]
        retry_id, retry = self.wait_send("uroce0", psn)
        self.assertGreater(retry_id, victim_id)
        after_drop = self.counters("uroce0")
        self.assertEqual(after_drop["fault_dropped"], faults["fault_dropped"] + 1)
        self.assertGreater(after_drop["retransmit_timeouts"], faults["retransmit_timeouts"])

        # Sent twice: the responder executes the first copy and sees the
        # second as a duplicate.
        duplicates = self.counters("uroce1")["duplicate_request"]
        self.assertIn("duplicated", self.step("uroce0", "duplicate", str(retry_id)))
        self.step("uroce0", "next", str(retry_id))
        harness.wait_for(lambda: self.counters("uroce1")["duplicate_request"] == duplicates + 1,
                         5.0, "the duplicate to reach uroce1",
                         lambda: "%s\n%s\n%s" % (self.uroce("stats").stdout,
                                                 self.uroce("step", "uroce0").stdout,
                                                 self.daemon.log()))
        self.assertEqual(self.counters("uroce0")["fault_duplicated"],
                         faults["fault_duplicated"] + 1)

        self.assertEqual(self.step("uroce0", "run"), "uroce0: wire running, 0 held\n")
        for side in (client, server):
            output = side.communicate(timeout=30)[0]
            self.assertEqual(side.returncode, 0, output + self.daemon.log())

    def test_refusals_name_what_is_wrong(self):
        self.assert_exit(self.uroce("step", "uroce7", "pause"), EXIT_FAILURE,
                         "no device named uroce7")
        self.assert_exit(self.uroce("step", "uroce0", "next"), EXIT_FAILURE,
                         "uroce0 holds no packet: its wire is not paused")
        self.assert_exit(self.uroce("step", "uroce0", "fly"), EXIT_USAGE,
                         "'fly' is not pause, next, drop, duplicate or run")
        self.assert_exit(self.uroce("step", "uroce0", "pause", "3"), EXIT_USAGE,
                         "only next, drop and duplicate take a packet id")
        self.step("uroce0", "pause")
        self.addCleanup(self.step, "uroce0", "run")
        self.assert_exit(self.uroce("step", "uroce0", "drop", "77"), EXIT_FAILURE,
                         "uroce0 holds no packet 77")


def artifacts_dir():
    """Where screenshots go: $UROCE_ARTIFACTS_DIR (ctest sets it in the build tree)."""
    path = os.environ.get("UROCE_ARTIFACTS_DIR") or tempfile.mkdtemp(prefix="uroce-artifacts-")
    os.makedirs(path, exist_ok=True)
    return path


def http_get(port, target, headers=None, host=None):
    """(status, headers, body) of one request to the console, by hand so
    that Host and Origin can be anything."""
    fields = {"Host": host or "127.0.0.1:%d" % port, "Connection": "close", **(headers or {})}
    lines = ["GET %s HTTP/1.1" % target] + ["%s: %s" % item for item in fields.items()]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        data = b""
        # A WebSocket stays open after its 101: the head is enough.
        while (chunk := s.recv(65536)) and not data.startswith(b"HTTP/1.1 101"):
            data += chunk
            if data.startswith(b"HTTP/1.1 101") and b"\r\n\r\n" in data:
                break
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    return (int(status_line.split()[1]),
            {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}, body)


WS_UPGRADE = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
              "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}


class ConsoleTest(LabTestCase):
    """`uroce console` (docs/console.md) in Debian's Chromium, headless, driven
    by Selenium: the page shows a running ibv_rc_pingpong's two QPs in RTS
    and its packets in the ladder; in step mode one click releases exactly
    one packet; without the token neither the page nor the WebSocket opens;
    a read-only console has no controls and refuses commands."""

    def start_console(self, *options):
        proc = subprocess.Popen([self.tool, "console", *options], env=self.env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        self.addCleanup(self.stop_console, proc)
        line = proc.stdout.readline()
        match = re.match(r"uroce console: (http://127\.0\.0\.1:(\d+)/\?token=([0-9a-f]{32}))",
                         line)
        if not match:
            proc.wait(timeout=10)
            self.fail("uroce console printed %r%r" % (line, proc.stderr.read()))
        return proc, match.group(1), int(match.group(2)), match.group(3)

    @staticmethod
    def stop_console(proc):
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        proc.stdout.close()
        proc.stderr.close()

    def browser(self):
        try:
            from selenium import webdriver
        except ImportError:
            self.fail("python3-selenium is not installed (tools/install-deps installs it)")
        options = webdriver.ChromeOptions()
        options.binary_location = (shutil.which("chromium") or shutil.which("chromium-browser")
                                   or "/usr/bin/chromium")
        for argument in ("--headless", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1600,1100"):
            options.add_argument(argument)
        from selenium.webdriver.chrome.service import Service
        service = Service(executable_path=shutil.which("chromedriver") or "/usr/bin/chromedriver")
        driver = webdriver.Chrome(options=options, service=service)
        self.addCleanup(driver.quit)
        return driver

    def css(self, driver, selector):
        from selenium.webdriver.common.by import By
        return driver.find_elements(By.CSS_SELECTOR, selector)

    def counters(self, device):
        result = self.uroce("stats", device)
        self.assert_exit(result, 0)
        return harness.parse_stats(result.stdout)[device]

    def click(self, driver, selector):
        """Clicks as a user would: scrolls at once (the page scrolls smoothly, so a plain
        scrollIntoView leaves the element below the window while the click lands), and clicks
        again if a snapshot redrew the page between the scroll and the click."""
        from selenium.common.exceptions import (ElementClickInterceptedException,
                                                StaleElementReferenceException)
        deadline = time.monotonic() + 10.0
        while True:
            try:
                element = self.css(driver, selector)[0]
                driver.execute_script(
                    "arguments[0].scrollIntoView({block: 'center', behavior: 'instant'});",
                    element)
                element.click()
                return
            except (ElementClickInterceptedException, StaleElementReferenceException):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def wait_connected(self, driver):
        def diagnostics():
            return "%s\n%s" % (driver.get_log("browser"), self.daemon.log())
        harness.wait_for(lambda: driver.execute_script(
            "const s = document.querySelector('#status'); return s && s.textContent;")
            == "connected", 20.0, "the page to connect", diagnostics)

    def test_requests_without_the_token_are_refused(self):
        proc, url, port, token = self.start_console()
        self.assertEqual(http_get(port, "/")[0], 403)
        self.assertEqual(http_get(port, "/?token=" + "0" * 32)[0], 403)
        self.assertEqual(http_get(port, "/console.js")[0], 403)
        self.assertEqual(http_get(port, "/ws", WS_UPGRADE)[0], 403)
        status, headers, body = http_get(port, "/?token=" + token)
        self.assertEqual(status, 200)
        self.assertIn(b"<html", body.lower())
        self.assertIn("uroce_token=%s" % token, headers.get("set-cookie", ""))
        self.assertIn("HttpOnly", headers["set-cookie"])
        cookie = {"Cookie": "uroce_token=" + token}
        self.assertEqual(http_get(port, "/console.js", cookie)[0], 200)
        self.assertEqual(http_get(port, "/ws", dict(WS_UPGRADE, **cookie))[0], 101)
        # Another site's page, or a name rebound to 127.0.0.1, gets nothing.
        self.assertEqual(http_get(port, "/ws", dict(WS_UPGRADE, Origin="http://evil.example",
                                                    **cookie))[0], 403)
        self.assertEqual(http_get(port, "/?token=" + token, host="evil.example:%d" % port)[0],
                         403)
        self.assertEqual(http_get(port, "/nothing?token=" + token)[0], 404)

        second = self.uroce("console")
        self.assert_exit(second, EXIT_FAILURE, "a console runs already at http://127.0.0.1:%d/"
                         % port)
        self.assertIn("console http://127.0.0.1:%d/ for client pid %d" % (port, proc.pid),
                      self.daemon.status().text)
        self.stop_console(proc)
        self.assertEqual(proc.returncode, 0)
        with self.assertRaises(OSError):
            http_get(port, "/?token=" + token)

    def test_page_shows_qps_and_packets_and_steps_one_packet(self):
        proc, url, port, token = self.start_console()
        driver = self.browser()
        driver.get(url)
        self.wait_connected(driver)

        program = harness.require_program("ibv_rc_pingpong")
        tcp_port = harness.free_tcp_port()
        common = ["-g", "0", "-p", str(tcp_port), "-n", "1000000"]
        for args in ([program, "-d", "uroce1", *common],
                     [program, "-d", "uroce0", *common, "127.0.0.2"]):
            side = subprocess.Popen(args, env=self.daemon.env(), stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            self.addCleanup(self.finish, side)
            if args[2] == "uroce1":
                harness.wait_for(lambda: harness.tcp_port_listening(tcp_port), 10.0,
                                 "ibv_rc_pingpong to listen", self.daemon.log)

        rows = harness.wait_for(
            lambda: len(self.css(driver, "tr.qp-row[data-state='RTS']")) == 2 and
            self.css(driver, "tr.qp-row"), 20.0, "both QPs in RTS on the page", self.daemon.log)
        self.assertEqual(sorted(row.get_attribute("data-device") for row in rows),
                         ["uroce0", "uroce1"])
        harness.wait_for(lambda: len(self.css(driver, "#ladder g.ladder-packet")) > 0, 20.0,
                         "packets in the ladder", self.daemon.log)
        fates = driver.execute_script(
            "return [...document.querySelectorAll('#ladder g.ladder-packet')]"
            ".map(g => g.dataset.fate);")
        self.assertTrue(fates and set(fates) <= {"sent", "lost", "held", "released"}, fates)
        driver.save_screenshot(os.path.join(artifacts_dir(), "console-live.png"))

        panel = "div.step-panel[data-device='uroce0'] "
        self.click(driver, panel + "button.step-pause")
        harness.wait_for(lambda: self.uroce("step", "uroce0").stdout.count("\n") > 1, 10.0,
                         "a packet held on uroce0", self.daemon.log)
        harness.wait_for(lambda: self.css(driver, panel + "li.held-packet"), 10.0,
                         "the held packet on the page", self.daemon.log)
        time.sleep(0.3)  # uroce1's answers to what left before the pause arrive
        before = self.counters("uroce1")["rcvd_pkts"]
        self.click(driver, panel + "button.step-next")
        harness.wait_for(lambda: self.counters("uroce1")["rcvd_pkts"] > before, 10.0,
                         "the released packet at uroce1", self.daemon.log)
        time.sleep(0.5)
        self.assertEqual(self.counters("uroce1")["rcvd_pkts"], before + 1,
                         "one click let more than one packet through")
        driver.save_screenshot(os.path.join(artifacts_dir(), "console-step.png"))
        self.click(driver, panel + "button.step-run")
        harness.wait_for(lambda: self.uroce("step", "uroce0").stdout.startswith(
            "uroce0: wire running"), 10.0, "the wire to run again", self.daemon.log)

    @staticmethod
    def talk(driver, on_message):
        """Runs `on_message` (JavaScript seeing `ws`, `message` and `done`) on
        each message of a WebSocket of the page's console; what it passes
        to done(), which closes the socket."""
        return driver.execute_async_script("""
            const finish = arguments[arguments.length - 1];
            const ws = new WebSocket(`ws://${location.host}/ws`);
            const done = (value) => { ws.close(); finish(value); };
            ws.onmessage = (event) => {
                const message = JSON.parse(event.data);
                %s
            };
            ws.onerror = () => finish({error: "websocket failed"});
        """ % on_message)

    def test_a_pcap_file_replays_decoded_by_the_daemon(self):
        """A trace of ibv_rc_pingpong opened on a read-only console's page:
        the page has the daemon decode its packets (the page knows no RoCE
        of its own) and replays them on the ladder with the daemon's opcode
        names; a malformed decode command is refused with why."""
        program = harness.require_program("ibv_rc_pingpong")
        pcap = os.path.join(self.daemon.base, "pingpong.pcap")
        trace = subprocess.Popen([self.tool, "trace", "uroce0", "--pcap", pcap, "--count", "40"],
                                 env=self.env, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(self.finish, trace)
        harness.wait_for(lambda: "tracing" in self.uroce("status").stdout, 10.0,
                         "the trace to start", self.daemon.log)
        pair = harness.run_pingpong(self.daemon.env(), "uroce1", "uroce0", 20, 64,
                                    program=program, log=self.daemon.log)
        self.assertEqual([side.returncode for side in pair], [0, 0], pair[1].output)
        trace.wait(timeout=10)

        proc, url, port, token = self.start_console("--read-only")
        driver = self.browser()
        driver.get(url)
        self.wait_connected(driver)
        self.css(driver, "#open-pcap")[0].send_keys(pcap)
        harness.wait_for(lambda: "Replaying" in self.css(driver, "#recording-result")[0].text,
                         20.0, "the replay to start", self.daemon.log)
        # Every packet of the file is RoCE, decoded without an error.
        self.assertRegex(self.css(driver, "#recording-result")[0].text,
                         r"Replaying pingpong\.pcap: (\d+) RoCEv2 packets of \1\b")
        labels = driver.execute_script(
            "return [...document.querySelectorAll('#ladder g.ladder-packet')]"
            ".map(g => g.textContent);")
        self.assertTrue(labels, "no packet on the ladder")
        self.assertTrue(any("RC_SEND_ONLY" in label for label in labels), labels)
        self.assertTrue(any("RC_ACKNOWLEDGE" in label for label in labels), labels)
        driver.save_screenshot(os.path.join(artifacts_dir(), "console-replay.png"))

        answer = self.talk(driver, """
            if (message.type === "hello") {
                ws.send(JSON.stringify({id: 9, command: "decode",
                                        packets: [{bytes: "zz", total: 1}]}));
            } else if (message.type === "result") {
                done(message);
            }
        """)
        self.assertEqual((answer["ok"], answer["error"]), (False, "EINVAL"), answer)
        self.assertIn("is hex", answer["message"])
        hello = self.talk(driver, """
            if (message.type === "hello") {
                done(message.wire);
            }
        """)
        self.assertEqual(hello["opcodes"]["4"], "RC_SEND_ONLY")
        self.assertEqual(hello["header_bytes"]["RETH"], 16)
        self.assertEqual(len(hello["rnr_timer_us"]), 32)

    def test_read_only_console_has_no_controls_and_refuses_commands(self):
        proc, url, port, token = self.start_console("--read-only")
        driver = self.browser()
        driver.get(url)
        self.wait_connected(driver)
        harness.wait_for(lambda: self.css(driver, "div.step-panel"), 10.0, "the step panels",
                         self.daemon.log)
        visible = [b for b in self.css(driver, "button.step-pause, button.step-next, "
                                               "form.fault-form") if b.is_displayed()]
        self.assertEqual(visible, [], "a read-only console shows controls")
        answer = self.talk(driver, """
            if (message.type === "hello") {
                ws.send(JSON.stringify({id: 7, command: "step", device: "uroce0",
                                        action: "pause"}));
            } else if (message.type === "result") {
                done(message);
            }
        """)
        self.assertEqual(answer, {"type": "result", "id": 7, "ok": False, "error": "EPERM",
                                  "message": "this console is read-only"})
        # The page describes counters as the daemon does: hello carries stats.h's list.
        hello = self.talk(driver, """
            if (message.type === "hello") {
                done(message);
            }
        """)
        self.assertEqual(hello.get("counters"), harness.counter_descriptions())
        self.assertTrue(self.uroce("step", "uroce0").stdout.startswith("uroce0: wire running"))


if __name__ == "__main__":
    unittest.main()

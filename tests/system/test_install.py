"""`cmake --install` as a user or a packager runs it: every file lands under
the prefix (or DESTDIR), and the installed `uroce` finds its daemon, bridge
and provider relative to where it is, so programs see the devices from the
installed files alone."""

import os
import re
import shutil
import subprocess
import tempfile
import unittest

import harness

# What an installation holds, relative to its prefix (CMakeLists.txt).
EXPECTED = [
    "bin/uroce",
    "bin/uroced",
    r"lib(/[^/]+)?/uroce/liburoce-bridge\.so",
    r"lib(/[^/]+)?/libibverbs/liburoce-rdmav\d+\.so",
    "etc/libibverbs.d/uroce.driver",
    "etc/uroce/uroce.conf",
    "lib/systemd/system/uroced.service",
    "lib/systemd/user/uroced.service",
    r"share/man/man1/uroce\.1",
    r"share/man/man8/uroced\.8",
]


class InstallTest(unittest.TestCase):

    def setUp(self):
        self.build_dir = harness.required_path("UROCE_BUILD_DIR")
        self.cmake = harness.required_path("UROCE_CMAKE")
        self.base = tempfile.mkdtemp(prefix="uroce-install-")
        self.addCleanup(shutil.rmtree, self.base, True)

    def install(self, prefix, destdir=None):
        """The paths cmake --install wrote, from its own account."""
        env = dict(os.environ)
        env.pop("DESTDIR", None)
        if destdir:
            env["DESTDIR"] = destdir
        result = subprocess.run([self.cmake, "--install", self.build_dir, "--prefix", prefix],
                                env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        return re.findall(r"^-- (?:Installing|Up-to-date): (.*)$", result.stdout, re.M)

    def assert_installation(self, paths, root):
        outside = [p for p in paths if not p.startswith(root + "/")]
        self.assertEqual(outside, [], "cmake --install wrote outside " + root)
        relative = [os.path.relpath(p, root) for p in paths]
        for pattern in EXPECTED:
            self.assertTrue(any(re.fullmatch(pattern, r) for r in relative),
                            "%s is not installed; installed: %s" % (pattern, relative))
        for path in paths:
            self.assertTrue(os.path.exists(path), path)

    def test_prefix_holds_everything(self):
        prefix = os.path.join(self.base, "prefix")
        self.assert_installation(self.install(prefix), prefix)

    def test_destdir_holds_everything(self):
        destdir = os.path.join(self.base, "staging")
        paths = self.install("/opt/uroce-test", destdir=destdir)
        self.assert_installation(paths, destdir + "/opt/uroce-test")

    def test_the_installed_command_finds_its_parts(self):
        prefix = os.path.join(self.base, "prefix")
        self.install(prefix)
        tool = os.path.join(prefix, "bin", "uroce")
        runtime_dir = os.path.join(self.base, "run")
        env = harness.tool_environment(runtime_dir)
        self.addCleanup(harness.run_program, [tool, "stop"], env)

        printed = harness.run_program([tool, "env"], env)
        self.assertEqual(printed.returncode, 0, printed.stderr)
        values = dict(re.findall(r"^export (\w+)='([^']*)'$", printed.stdout, re.M))
        for name in ("LD_PRELOAD", "RDMAV_DRIVERS"):
            parts = [p for p in values[name].split(":") if p and "/libasan" not in p
                     and "/libubsan" not in p]
            self.assertTrue(parts and all(p.startswith(prefix + "/") for p in parts),
                            "%s=%s is not from the installation" % (name, values[name]))

        started = harness.run_program(
            [tool, "start", "--udp-port", str(harness.free_udp_port())], env)
        self.assertEqual(started.returncode, 0, started.stdout + started.stderr)
        listed = harness.run_program([tool, "exec", "--", "ibv_devices"], env)
        self.assertEqual(listed.returncode, 0, listed.stderr)
        for device in harness.DEFAULT_DEVICES:
            self.assertIn(device, listed.stdout)
        info = harness.run_program([tool, "exec", "--", "ibv_devinfo", "-d", "uroce0"], env)
        self.assertEqual(info.returncode, 0, info.stderr)
        self.assertRegex(info.stdout, r"state:\s+PORT_ACTIVE")


if __name__ == "__main__":
    unittest.main()

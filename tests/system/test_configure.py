"""Configure against libibverbs releases uroce has no layout for, or that are
below its floor: it stops with a sentence that says which layouts it
knows and where to add one (provider/rdma_core_releases.cmake).

Each case is a libibverbs made here that exports what that release's
would (verbs_register_driver_<N>, __verbs_log) with its pkg-config file,
and a real configure of this checkout pointed at it with
PKG_CONFIG_PATH."""

import os
import shutil
import subprocess
import tempfile
import textwrap
import unittest

import harness

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def make_libibverbs(directory, release, abi, verbs_log=True):
    """A libibverbs.so.1.14.<release>.0 exporting verbs_register_driver_<abi>
    (and __verbs_log) in IBVERBS_PRIVATE_<abi>, and its libibverbs.pc."""
    lib = os.path.join(directory, "lib")
    os.makedirs(os.path.join(lib, "pkgconfig"))
    source = os.path.join(directory, "stub.c")
    symbols = ["verbs_register_driver_%d" % abi] + (["__verbs_log"] if verbs_log else [])
    with open(source, "w") as f:
        f.write("".join("void %s(void) {}\n" % name
                        for name in symbols + ["ibv_get_device_list"]))
    script = os.path.join(directory, "libibverbs.map")
    with open(script, "w") as f:
        f.write("IBVERBS_1.1 { global: ibv_get_device_list; };\n"
                "IBVERBS_PRIVATE_%d { global: %s; local: *; };\n" % (abi, "; ".join(symbols)))
    real = "libibverbs.so.1.14.%d.0" % release
    subprocess.run(["cc", "-shared", "-fPIC", "-o", os.path.join(lib, real), source,
                    "-Wl,--version-script=" + script, "-Wl,-soname,libibverbs.so.1"],
                   check=True, capture_output=True)
    os.symlink(real, os.path.join(lib, "libibverbs.so.1"))
    os.symlink("libibverbs.so.1", os.path.join(lib, "libibverbs.so"))
    with open(os.path.join(lib, "pkgconfig", "libibverbs.pc"), "w") as f:
        f.write(textwrap.dedent("""\
            libdir=%s
            Name: libibverbs
            Description: libibverbs of rdma-core v%d, as configure sees it
            Version: 1.14.%d.0
            Libs: -L${libdir} -libverbs
            Cflags:
            """ % (lib, release, release)))
    return os.path.join(lib, "pkgconfig")


class ConfigureTest(unittest.TestCase):

    def setUp(self):
        if not shutil.which("cc"):
            raise unittest.SkipTest("no C compiler (cc)")
        self.cmake = harness.required_path("UROCE_CMAKE")
        self.work = tempfile.mkdtemp(prefix="uroce-configure-")
        self.addCleanup(shutil.rmtree, self.work, True)

    def configure(self, release, abi, verbs_log=True):
        """Configures this checkout against the made libibverbs; returns the
        configure's output, which must be a failure."""
        pkgconfig = make_libibverbs(os.path.join(self.work, "rdma-core"), release, abi,
                                    verbs_log)
        env = dict(os.environ, PKG_CONFIG_PATH=pkgconfig)
        env.pop("PKG_CONFIG_LIBDIR", None)
        result = subprocess.run(
            [self.cmake, "-S", SOURCE_DIR, "-B", os.path.join(self.work, "build"),
             "-DUROCE_TESTS=OFF"],
            capture_output=True, text=True, env=env, timeout=300)
        output = " ".join((result.stdout + result.stderr).split())
        self.assertNotEqual(result.returncode, 0, output)
        return output

    def assert_names_the_known_layouts_and_where_to_add_one(self, output):
        self.assertIn("uroce knows these libibverbs layouts: ABI 34 for v37-v43, v44, v45-v56; "
                      "ABI 57 for v57-v58; ABI 59 for v59-v61, v62-v63; ABI 64 for v64; "
                      "ABI 65 for v65.", output)
        self.assertIn("in emulator/protocol/driver_abi.h", output)
        self.assertIn("add its row to UROCE_LAYOUTS in provider/rdma_core_releases.cmake",
                      output)

    def test_an_unknown_private_abi_stops_configure_with_the_known_layouts(self):
        """rdma-core v66 exporting verbs_register_driver_66."""
        output = self.configure(66, 66)
        self.assertIn("is rdma-core v66 and exports verbs_register_driver_66, a pairing uroce "
                      "has no layout for.", output)
        self.assert_names_the_known_layouts_and_where_to_add_one(output)

    def test_a_new_release_of_a_known_abi_stops_configure_too(self):
        """v66 still exporting verbs_register_driver_65 may have added ops, as v62
        did within ABI 59."""
        output = self.configure(66, 65)
        self.assertIn("is rdma-core v66 and exports verbs_register_driver_65, a pairing uroce "
                      "has no layout for.", output)
        self.assert_names_the_known_layouts_and_where_to_add_one(output)

    def test_a_release_below_the_floor_is_refused_with_the_reason(self):
        """v36 has ABI 34 but no __verbs_log."""
        output = self.configure(36, 34, verbs_log=False)
        self.assertIn("is rdma-core v36 and exports verbs_register_driver_34. uroce needs "
                      "rdma-core v37 or later", output)
        self.assertIn("__verbs_log, which libibverbs exports from v37", output)


if __name__ == "__main__":
    unittest.main()

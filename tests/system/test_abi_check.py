"""The provider's check at load (provider/abi_check.h): loaded by a
libibverbs whose layouts are not those it was built for, it does not
register and says why on stderr; loaded by its own, it registers.

The foreign libibverbs is an rdma-core installed in a prefix
($UROCE_FOREIGN_RDMA_CORE, e.g. one of another release than the build's;
`tools/test --rdma-core PREFIX --foreign OTHER` sets it). Without it, the
refusal case is skipped."""

import glob
import os
import re
import unittest

import harness


def libibverbs_dir(prefix):
    """The directory of the libibverbs.so.1 installed under prefix."""
    for candidate in sorted(glob.glob(os.path.join(prefix, "lib*", "**", "libibverbs.so.1"),
                                      recursive=True)):
        return os.path.dirname(candidate)
    raise AssertionError("no libibverbs.so.1 under %s" % prefix)


def release_of(library_dir):
    """The rdma-core release of the libibverbs in library_dir, by its file name."""
    real = os.path.realpath(os.path.join(library_dir, "libibverbs.so.1"))
    match = re.search(r"libibverbs\.so\.\d+\.\d+\.(\d+)\.\d+$", real)
    return int(match.group(1)) if match else 0


class AbiCheckTest(harness.DaemonTestCase):
    """ibv_devices through the build's libibverbs and through another."""

    @classmethod
    def setUpClass(cls):
        harness.require_program("ibv_devices")
        super().setUpClass()

    def test_the_provider_registers_with_its_own_libibverbs(self):
        """With the libibverbs it was built against, nothing is refused."""
        result = self.run_ok(["ibv_devices"])
        self.assertIn("uroce0", result.stdout)
        self.assertNotIn("does not register", result.stderr)

    def test_another_layout_is_refused_with_a_sentence(self):
        """Through a libibverbs of a release with other layouts, the provider
        names what it was built for and what it found, and registers
        nothing, so no uroce device is listed."""
        foreign = os.environ.get("UROCE_FOREIGN_RDMA_CORE")
        if not foreign:
            raise unittest.SkipTest("UROCE_FOREIGN_RDMA_CORE names no other rdma-core")
        library_dir = libibverbs_dir(foreign)
        with open(os.path.join(library_dir, "libibverbs.so.1"), "rb") as f:
            exported = f.read()
        if b"verbs_register_driver_%d\0" % int(harness.provider_abi()) not in exported:
            raise unittest.SkipTest("%s has another private ABI: it looks for another file "
                                    "than liburoce-rdmav%d.so" % (foreign, int(harness.provider_abi())))
        env = self.daemon.env()
        env["LD_LIBRARY_PATH"] = library_dir
        program = os.path.join(foreign, "bin", "ibv_devices")
        if not os.access(program, os.X_OK):
            program = harness.require_program("ibv_devices")
        result = harness.run_program([program], env)
        release = release_of(library_dir)
        self.assertIn("uroce: this provider was built for the libibverbs of rdma-core v",
                      result.stderr)
        self.assertIn("private ABI %d, configured against v" % int(harness.provider_abi()),
                      result.stderr)
        if release:
            self.assertIn(") is v%d" % release, result.stderr)
        self.assertIn("The uroce provider does not register", result.stderr)
        self.assertNotIn("uroce0", result.stdout)


if __name__ == "__main__":
    unittest.main()

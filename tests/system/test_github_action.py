"""The composite GitHub Action (packaging/github-action): its step, the
setup script, run as a job would run it, with the build's uroce standing
in for the installed one: the daemon starts as the job's user and the
variables it leaves in $GITHUB_ENV are all a later step needs to run
ibv_devices and ibv_rc_pingpong (docs/ci.md)."""

import os
import re
import shutil
import subprocess
import tempfile
import unittest

import harness

ACTION = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir,
                      "packaging", "github-action")


class GitHubActionTest(unittest.TestCase):

    def setUp(self):
        self.base = tempfile.mkdtemp(prefix="uroce-action-")
        self.addCleanup(shutil.rmtree, self.base, True)
        self.runtime = os.path.join(self.base, "run")
        self.github_env = os.path.join(self.base, "github_env")
        open(self.github_env, "w").close()
        # What the runner gives a step: none of uroce's variables.
        self.job = {k: v for k, v in os.environ.items()
                    if k not in ("SYSFS_PATH", "LD_PRELOAD", "RDMAV_DRIVERS")}
        self.job.update(GITHUB_ENV=self.github_env, GITHUB_ACTION_PATH=ACTION,
                        UROCE=harness.tool_path(), UROCE_RUNTIME_DIR=self.runtime)
        self.addCleanup(subprocess.run, [harness.tool_path(), "stop"], env=self.job,
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def run_step(self, **inputs):
        env = dict(self.job, **{"INPUT_" + k.upper(): v for k, v in inputs.items()})
        return subprocess.run(["bash", os.path.join(ACTION, "setup")], env=env, text=True,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=60)

    def exported(self):
        with open(self.github_env) as f:
            return dict(line.rstrip("\n").split("=", 1) for line in f if line.strip())

    def test_the_action_runs_its_setup_script(self):
        with open(os.path.join(ACTION, "action.yml")) as f:
            action = f.read()
        self.assertIn("using: composite", action)
        self.assertIn('run: \'"$GITHUB_ACTION_PATH/setup"\'', action)
        for name in ("package", "start-args", "export-environment"):
            self.assertIn("INPUT_%s: ${{ inputs.%s }}" % (name.upper().replace("-", "_"), name),
                          action)

    def test_a_later_step_sees_the_devices(self):
        result = self.run_step(start_args="--udp-port %d" % harness.free_udp_port())
        self.assertEqual(result.returncode, 0, result.stdout)
        self.assertRegex(result.stdout, r"(?m)^device uroce0 address 127\.0\.0\.1 ")
        exported = self.exported()
        self.assertEqual(sorted(exported), ["LD_PRELOAD", "RDMAV_DRIVERS", "SYSFS_PATH",
                                            "UROCE_RUNTIME_DIR"])
        self.assertEqual(exported["UROCE_RUNTIME_DIR"], self.runtime)
        later = dict(self.job, **exported)
        devices = harness.run_program([harness.require_program("ibv_devices")], later)
        self.assertEqual(devices.returncode, 0, devices.stderr)
        self.assertEqual(re.findall(r"^\s+(uroce\d)\s", devices.stdout, re.M),
                         ["uroce0", "uroce1"])
        for side in harness.run_pingpong(later, "uroce0", "uroce1", 100, 4096):
            self.assertEqual(side.returncode, 0, side.output)

    def test_only_the_runtime_directory_for_uroce_exec(self):
        result = self.run_step(start_args="--udp-port %d" % harness.free_udp_port(),
                               export_environment="false")
        self.assertEqual(result.returncode, 0, result.stdout)
        self.assertEqual(self.exported(), {"UROCE_RUNTIME_DIR": self.runtime})

    def test_a_missing_package_fails_the_step_saying_so(self):
        result = self.run_step(package=os.path.join(self.base, "uroce_*.deb"))
        self.assertEqual(result.returncode, 1, result.stdout)
        self.assertIn("uroce action: no package at", result.stdout)
        self.assertEqual(self.exported(), {})


if __name__ == "__main__":
    unittest.main()

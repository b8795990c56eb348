"""python3-pyverbs, unmodified, drives a uroce device through libibverbs and
the provider; the daemon's status shows what it holds."""

import os
import unittest

import harness
from harness import DEFAULT_DEVICES


class PyverbsTest(harness.DaemonTestCase):

    @classmethod
    def setUpClass(cls):
        harness.require_pyverbs()
        super().setUpClass()

    def setUp(self):
        self.addCleanup(self.daemon.wait_until_idle)  # runs last: the client is closed
        self.client = harness.VerbsClient(self.daemon)
        self.addCleanup(self.client.close)

    def test_device_list_names_both_devices(self):
        """pyverbs' get_device_list() returns uroce0 and uroce1."""
        result = self.run_ok([harness.PYTHON, "-c",
                              "from pyverbs.device import get_device_list\n"
                              "print(sorted(d.name.decode() for d in get_device_list()))"])
        self.assertEqual(result.stdout.strip(), str(sorted(DEFAULT_DEVICES)))

    def test_queries_report_the_documented_device(self):
        """query_device, query_port(1) and query_gid(1, 0) on uroce0: node GUID
        from the address, one ACTIVE Ethernet port with MTU 4096, GID 0 the
        IPv4-mapped address."""
        self.client.must("open", "uroce0")
        answer = self.client.must("query")
        address = DEFAULT_DEVICES["uroce0"]
        self.assertEqual(answer["node_guid"], harness.node_guid_for(address))
        self.assertEqual(answer["phys_port_cnt"], 1)
        self.assertEqual(answer["port_state"], harness.IBV_PORT_ACTIVE)
        self.assertEqual(answer["max_mtu"], harness.IBV_MTU_4096)
        self.assertEqual(answer["active_mtu"], harness.IBV_MTU_4096)
        self.assertEqual(answer["link_layer"], harness.IBV_LINK_LAYER_ETHERNET)
        self.assertEqual(answer["gid0"], harness.gid0_groups_for(address))

    def test_objects_are_counted_while_open_and_gone_after_close(self):
        """PD, MR, CQ and an RC QP moved to INIT appear in the daemon's status,
        for the device and for this client's pid; after the context is
        closed the device has no objects and no client."""
        self.client.must("open", "uroce0")
        self.client.must("pd")
        mr = self.client.must("mr")
        self.assertNotEqual(mr["lkey"], 0)
        self.client.must("cq")
        qp = self.client.must("qp")
        self.assertNotEqual(qp["qp_num"], 0)
        self.assertEqual(self.client.must("qp_to_init")["state"], harness.IBV_QPS_INIT)

        expected = harness.counts(pd=1, mr=1, cq=1, qp=1)
        status = self.daemon.status()
        self.assertEqual(status.devices["uroce0"].objects, expected, status.text)
        self.assertEqual(status.devices["uroce1"].objects, harness.zero_counts(), status.text)
        self.assertEqual(status.client_count, 1, status.text)
        self.assertEqual([(c.pid, c.device, c.objects) for c in status.clients],
                         [(self.client.pid, "uroce0", expected)], status.text)

        self.client.must("close")
        self.daemon.wait_for_counts("uroce0", harness.zero_counts())
        status = self.daemon.status()
        self.assertEqual(status.client_count, 0, status.text)
        self.assertEqual(status.clients, [], status.text)

    def test_ud_send_and_reply_through_an_ah_from_the_completion(self):
        """pyverbs_scripts/ud_send.py: UD between uroce0 and uroce1 with an AH,
        the GRH, source QP, immediate and payload checked, and a reply
        through ibv_create_ah_from_wc."""
        self.run_script("ud_send.py", "ud ok")

    def test_xrc_between_two_processes(self):
        """pyverbs_scripts/xrc_two_processes.py: one XRC_TGT QP serves the
        XRC SRQs of two processes sharing an XRC domain through a file: a
        multi-packet SEND to each, and an RDMA WRITE into the second
        process's memory, all with data checks."""
        self.run_script("xrc_two_processes.py", "xrc ok")

    def test_rdma_cm_rc_and_ud(self):
        """pyverbs_scripts/rdma_cm.py: CMID and AddrInfo connect RC (the
        synchronous API) and resolve UD (the asynchronous one, SIDR) from
        uroce0 to a server on uroce1, with data checked both ways."""
        self.run_script("rdma_cm.py", "rc ok\nud ok")

    def test_odp_implicit_and_prefetched(self):
        """pyverbs_scripts/odp.py: RC WRITE, READ and SEND between an implicit
        ODP MR over plain process memory and an ODP MR prefetched with
        ibv_advise_mr, with data checks."""
        self.run_script("odp.py", "odp ok")

    def test_extended_cq_polling(self):
        """pyverbs_scripts/extended_cq.py: a SEND with immediate and an RDMA
        WRITE with immediate read from an extended CQ in one start/next/end
        batch: every field, the data, and both completion timestamps."""
        self.run_script("extended_cq.py", "extended cq ok")

    def test_srq_limit_event(self):
        """pyverbs_scripts/srq_limit.py: an SRQ armed at 3 stays armed down to
        3 WQEs and reports IBV_EVENT_SRQ_LIMIT_REACHED (then disarmed) below
        it; every message's data checked."""
        self.run_script("srq_limit.py", "srq limit ok")

    def test_memory_windows(self):
        """pyverbs_scripts/memory_windows.py: a type 1 window bound by
        ibv_bind_mw and a type 2 window bound by a work request open parts
        of an MR without remote access; WRITE and READ through them, data
        checked; a SEND with invalidate retires the type 2 window."""
        self.run_script("memory_windows.py", "memory windows ok")

    def test_device_memory(self):
        """pyverbs_scripts/device_memory.py: SEND, WRITE, READ and both
        atomics between zero-based MRs on device memory of two devices,
        every byte read back with ibv_memcpy_from_dm."""
        self.run_script("device_memory.py", "device memory ok")

    def test_raw_packet_flow_steering_and_rss(self):
        """pyverbs_scripts/raw_packet_rss.py: Ethernet frames between
        RAW_PACKET QPs, steered by an Ethernet spec to a QP and by Ethernet +
        UDP specs to an RSS QP whose two WQs share the frames as the Toeplitz
        hash of their addresses and ports says; every frame's bytes checked."""
        # pyverbs has WQs and RSS from rdma-core v40 (pyverbs/wq.pyx).
        probe = self.daemon.run([harness.PYTHON, "-c", "import pyverbs.wq"])
        if "No module named 'pyverbs.wq'" in probe.stderr:
            self.skipTest("this pyverbs has no pyverbs.wq (rdma-core v40 added it)")
        self.run_script("raw_packet_rss.py", "raw packet ok")

    def run_script(self, name, last_line):
        """Runs pyverbs_scripts/`name`, which must exit 0 printing `last_line`."""
        script = os.path.join(os.path.dirname(__file__), "pyverbs_scripts", name)
        result = self.run_ok([harness.PYTHON, script])
        self.assertEqual(result.stdout.strip(), last_line, result.stderr)

    def test_opening_an_unknown_device_fails(self):
        """Context(name='nosuch') raises instead of opening something."""
        answer = self.client.call("open", "nosuch")
        self.assertFalse(answer["ok"], answer)


if __name__ == "__main__":
    unittest.main()

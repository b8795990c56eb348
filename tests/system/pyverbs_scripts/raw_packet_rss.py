"""RAW_PACKET QPs, flow steering and RSS with pyverbs. uroce0 (a) sends
Ethernet/IPv4/UDP frames from a RAW_PACKET QP; on uroce1 (b):
- an Ethernet spec steers frames for 02:00:00:00:00:b1 to a RAW_PACKET QP,
  which receives each whole;
- an Ethernet + UDP spec steers frames for 02:00:00:00:00:b2, port 4791, to
  an RSS QP over two WQs hashing IPv4 addresses and UDP ports with Toeplitz:
  frames whose hash (computed here) names the same table entry land in the
  same WQ, the two entries are different WQs, and both are used.
Exits 0 and prints "raw packet ok" when every check holds."""

import socket
import struct

from checks import check, poll
from checks import e
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.flow import Flow, FlowAttr
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr, QPInitAttrEx
from pyverbs.spec import EthSpec, TcpUdpSpec
from pyverbs.wq import WQ, WQAttr, WQInitAttr, RwqIndTable, RwqIndTableInitAttr, RxHashConf
from pyverbs.wr import SGE, RecvWR, SendWR

KEY = bytes.fromhex("6d5a56da255b0ec24167253d43a38fb0d0ca2bcbae7b30b477cb2da38030f20c"
                    "6a42b73bbeac01fa")
SLOT = 2048


def toeplitz(key, data):
    """The Microsoft RSS hash, as the device must compute it."""
    result = 0
    window = int.from_bytes(key[:4], "big")
    for i, byte in enumerate(data):
        for bit in range(7, -1, -1):
            if byte >> bit & 1:
                result ^= window
            nxt = key[i + 4] if i + 4 < len(key) else 0
            window = ((window << 1) | (nxt >> bit & 1)) & 0xffffffff
    return result


def udp_frame(dst_mac, sport, dport, payload):
    eth = bytes.fromhex(dst_mac.replace(":", "")) + bytes.fromhex("0200000000a1") + b"\x08\x00"
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 28 + len(payload), 0, 0, 64, 17, 0,
                     socket.inet_aton("10.0.0.1"), socket.inet_aton("10.0.0.2"))
    return eth + ip + struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload


def raw_qp(pd, cq):
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RAW_PACKET, scq=cq, rcq=cq,
                           cap=QPCap(max_send_wr=4, max_recv_wr=4)))
    qp.modify(QPAttr(qp_state=e.IBV_QPS_INIT, port_num=1), e.IBV_QP_STATE | e.IBV_QP_PORT)
    qp.modify(QPAttr(qp_state=e.IBV_QPS_RTR), e.IBV_QP_STATE)
    qp.modify(QPAttr(qp_state=e.IBV_QPS_RTS), e.IBV_QP_STATE)
    return qp


class Side:
    def __init__(self, name):
        self.ctx = Context(name=name)
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx, 64)
        self.mr = MR(self.pd, 16 * SLOT, e.IBV_ACCESS_LOCAL_WRITE)

    def sge(self, slot, length=SLOT):
        return SGE(self.mr.buf + slot * SLOT, length, self.mr.lkey)


def main():
    a = Side("uroce0")
    b = Side("uroce1")
    sender = raw_qp(a.pd, a.cq)

    def send(frame):
        a.mr.write(frame, len(frame), 15 * SLOT)
        sender.post_send(SendWR(wr_id=1, opcode=e.IBV_WR_SEND, num_sge=1,
                                sg=[a.sge(15, len(frame))]))
        wc = poll(a.cq)
        check(wc.status == e.IBV_WC_SUCCESS, "send status %d" % wc.status)

    # A MAC rule to a RAW_PACKET QP.
    receiver = raw_qp(b.pd, b.cq)
    mac_rule = FlowAttr(num_of_specs=1)
    mac_rule.specs.append(EthSpec(dst_mac="02:00:00:00:00:b1"))
    mac_flow = Flow(receiver, mac_rule)
    receiver.post_recv(RecvWR(7, 1, [b.sge(0)]))
    frame = udp_frame("02:00:00:00:00:b1", 1234, 80, bytes(range(200)))
    send(frame)
    wc = poll(b.cq)
    check(wc.status == e.IBV_WC_SUCCESS and wc.wr_id == 7 and wc.qp_num == receiver.qp_num,
          "raw receive: status %d, wr_id %d, qp 0x%x" % (wc.status, wc.wr_id, wc.qp_num))
    check(wc.byte_len == len(frame), "received %d bytes of %d" % (wc.byte_len, len(frame)))
    check(b.mr.read(len(frame), 0) == frame, "the frame as sent")

    # An RSS QP over two WQs, behind a MAC + UDP port rule.
    wqs = []
    for _ in range(2):
        wq = WQ(b.ctx, WQInitAttr(wq_pd=b.pd, wq_cq=b.cq, max_wr=16))
        wq.modify(WQAttr(attr_mask=e.IBV_WQ_ATTR_STATE, wq_state=e.IBV_WQS_RDY))
        wqs.append(wq)
    table = RwqIndTable(b.ctx, RwqIndTableInitAttr(log_ind_tbl_size=1, wqs_list=wqs))
    fields = (e.IBV_RX_HASH_SRC_IPV4 | e.IBV_RX_HASH_DST_IPV4 | e.IBV_RX_HASH_SRC_PORT_UDP |
              e.IBV_RX_HASH_DST_PORT_UDP)
    conf = RxHashConf(rx_hash_function=e.IBV_RX_HASH_FUNC_TOEPLITZ, rx_hash_key_len=len(KEY),
                      rx_hash_key=KEY, rx_hash_fields_mask=fields)
    rss = QP(b.ctx, QPInitAttrEx(qp_type=e.IBV_QPT_RAW_PACKET, pd=b.pd, hash_conf=conf,
                                 ind_table=table,
                                 comp_mask=e.IBV_QP_INIT_ATTR_PD | e.IBV_QP_INIT_ATTR_IND_TABLE |
                                 e.IBV_QP_INIT_ATTR_RX_HASH))
    rss_rule = FlowAttr(num_of_specs=2)
    rss_rule.specs.append(EthSpec(dst_mac="02:00:00:00:00:b2"))
    rss_rule.specs.append(TcpUdpSpec(e.IBV_FLOW_SPEC_UDP, dst_port=4791))
    rss_flow = Flow(rss, rss_rule)
    for i in range(8):
        for wq in wqs:
            wq.post_recv(RecvWR(100 + i, 1, [b.sge(1 + i)]))
    wq_of_entry = {}
    for i in range(8):
        sport = 20000 + 311 * i
        frame = udp_frame("02:00:00:00:00:b2", sport, 4791, bytes([i]) * 64)
        send(frame)
        wc = poll(b.cq)
        check(wc.status == e.IBV_WC_SUCCESS and wc.byte_len == len(frame),
              "RSS receive: status %d, %d bytes" % (wc.status, wc.byte_len))
        hashed = (socket.inet_aton("10.0.0.1") + socket.inet_aton("10.0.0.2") +
                  struct.pack("!HH", sport, 4791))
        # pyverbs does not show WQ numbers: the table entry the hash names
        # must always be the same WQ, and the two entries different WQs.
        entry = toeplitz(KEY, hashed) & 1
        check(wq_of_entry.setdefault(entry, wc.qp_num) == wc.qp_num,
              "port %d: entry %d is WQ 0x%x, this frame went to 0x%x" %
              (sport, entry, wq_of_entry[entry], wc.qp_num))
        check(b.mr.read(len(frame), (1 + wc.wr_id - 100) * SLOT) == frame, "RSS frame bytes")
    check(len(wq_of_entry) == 2 and len(set(wq_of_entry.values())) == 2,
          "both table entries used, each its own WQ: %s" % wq_of_entry)
    for obj in (rss_flow, mac_flow, rss, table, *wqs):
        obj.close()
    print("raw packet ok")


if __name__ == "__main__":
    main()

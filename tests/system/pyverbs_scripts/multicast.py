"""UD multicast through pyverbs' rdma_cm classes, between hosts: a receiver
joins GROUP from ADDRESS (rdma_join_multicast: the group's GID, its QP
attached) with COUNT receives posted, prints 'joined', and checks that the
COUNT messages arrive, each whole, after the 40-byte GRH; a sender joins
too and sends them to the group (QPN 0xffffff, the join's Q_Key).

usage: multicast.py receive|send ADDRESS GROUP COUNT
Prints 'received COUNT' or 'sent COUNT'; any failure raises.
"""

import sys

from checks import ce
from checks import e
from pyverbs.addr import AH
from pyverbs.cmid import AddrInfo, CMEvent, CMEventChannel, CMID, UDParam
from pyverbs.qp import QPCap, QPInitAttr

SIZE = 256
GRH = 40


def message(i):
    return bytes((i * 37 + j * 11) % 251 for j in range(SIZE))


def next_event(channel, kind):
    event = CMEvent(channel)
    if event.event_type != kind:
        raise AssertionError("event %d, expected %d" % (event.event_type, kind))
    return event


def close(*objects):
    """Closes in this order: what uses the CMID's PD and QP before the CMID,
    whose close destroys its QP and the CQs librdmacm made for it (left
    alive otherwise, and reported as a leak in check mode)."""
    for obj in objects:
        obj.close()


def member(address, group, count):
    """An ID on `address` with a UD QP, its address resolved to `group`."""
    channel = CMEventChannel()
    cmid = CMID(creator=channel, port_space=ce.RDMA_PS_UDP)
    cmid.bind_addr(AddrInfo(src=address, port_space=ce.RDMA_PS_UDP, flags=ce.RAI_PASSIVE))
    cmid.resolve_addr(AddrInfo(src=address, dst=group, port_space=ce.RDMA_PS_UDP))
    next_event(channel, ce.RDMA_CM_EVENT_ADDR_RESOLVED).ack_cm_event()
    cmid.create_qp(QPInitAttr(qp_type=e.IBV_QPT_UD,
                              cap=QPCap(max_send_wr=count, max_recv_wr=count)))
    return channel, cmid


def join(channel, cmid, group):
    cmid.join_multicast(addr=AddrInfo(src=group, port_space=ce.RDMA_PS_UDP))
    event = next_event(channel, ce.RDMA_CM_EVENT_MULTICAST_JOIN)
    params = UDParam(event)
    event.ack_cm_event()
    return params


def receive(address, group, count):
    channel, cmid = member(address, group, count)
    buffers = [cmid.reg_msgs(SIZE + GRH) for _ in range(count)]
    for mr in buffers:
        cmid.post_recv(mr)
    join(channel, cmid, group)
    print("joined", flush=True)
    for _ in range(count):
        wc = cmid.get_recv_comp()
        if wc.byte_len != SIZE + GRH:
            raise AssertionError("a datagram of %d bytes, not %d" % (wc.byte_len, SIZE + GRH))
    got = sorted(mr.read(SIZE, GRH) for mr in buffers)
    if got != sorted(message(i) for i in range(count)):
        raise AssertionError("the messages received are not the ones sent")
    cmid.leave_multicast(AddrInfo(src=group, port_space=ce.RDMA_PS_UDP))
    close(*buffers, cmid, channel)
    print("received", count)


def send(address, group, count):
    channel, cmid = member(address, group, count)
    params = join(channel, cmid, group)
    if params.qp_num != 0xffffff or params.qkey != 0x01234567:
        raise AssertionError("join gave QPN %#x, Q_Key %#x" % (params.qp_num, params.qkey))
    ah = AH(cmid.pd, attr=params.ah_attr)
    mr = cmid.reg_msgs(SIZE)
    for i in range(count):
        mr.write(message(i), SIZE)
        cmid.post_ud_send(mr, ah, rqpn=params.qp_num, length=SIZE)
        cmid.get_send_comp()
    cmid.leave_multicast(AddrInfo(src=group, port_space=ce.RDMA_PS_UDP))  # a QP in a group stays
    close(mr, ah, cmid, channel)
    print("sent", count)


if __name__ == "__main__":
    role, address, group, count = sys.argv[1:]
    {"receive": receive, "send": send}[role](address, group, int(count))

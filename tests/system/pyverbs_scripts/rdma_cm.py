"""pyverbs' rdma_cm classes (CMID, AddrInfo, CMEventChannel) over uroce: an
RC connection made with the synchronous API (rdma_create_ep, listen,
get_request, accept, connect) and a UD one resolved with the asynchronous
API (SIDR), between a server on 127.0.0.2 (uroce1) in a child process and a
client here (its source: 127.0.0.1, uroce0). Each side sends a message the
other checks byte by byte. Prints 'rc ok' and 'ud ok'; any failure raises.
"""

import multiprocessing as mp
import sys

from checks import ce
from checks import e
from pyverbs.addr import AH
from pyverbs.cmid import AddrInfo, CMEvent, CMEventChannel, CMID, ConnParam, UDParam
from pyverbs.mr import MR
from pyverbs.qp import QPCap, QPInitAttr

SERVER = "127.0.0.2"
SIZE = 1024
GRH = 40


def message(side, size=SIZE):
    return bytes((side * 31 + i * 7) % 251 for i in range(size))


def close(*objects):
    """Closes in this order: what uses a CMID's PD before the CMID, whose
    rdma_destroy_ep frees the PD (left allocated otherwise, and reported as
    a leak in check mode)."""
    for obj in objects:
        obj.close()


def expect(event, kind):
    if event.event_type != kind:
        raise AssertionError("event %d, expected %d" % (event.event_type, kind))


# --- RC, synchronous ---------------------------------------------------------

def rc_server(port, ready):
    attr = QPInitAttr(qp_type=e.IBV_QPT_RC, cap=QPCap(max_send_wr=2, max_recv_wr=2))
    info = AddrInfo(src=SERVER, src_service=str(port), port_space=ce.RDMA_PS_TCP,
                    flags=ce.RAI_PASSIVE)
    listener = CMID(creator=info, qp_init_attr=attr)
    listener.listen()
    ready.set()
    child = listener.get_request()
    mr = child.reg_msgs(SIZE)
    child.post_recv(mr)
    child.accept()
    child.get_recv_comp()
    if mr.read(SIZE, 0) != message(1):
        raise AssertionError("the server received other bytes than the client sent")
    mr.write(message(2), SIZE)
    child.post_send(mr)
    child.get_send_comp()
    child.disconnect()
    close(mr, child, listener)


def rc_client(port):
    attr = QPInitAttr(qp_type=e.IBV_QPT_RC, cap=QPCap(max_send_wr=2, max_recv_wr=2))
    info = AddrInfo(dst=SERVER, dst_service=str(port), port_space=ce.RDMA_PS_TCP)
    cmid = CMID(creator=info, qp_init_attr=attr)
    mr = cmid.reg_msgs(SIZE)
    cmid.post_recv(mr)
    cmid.connect()
    mr.write(message(1), SIZE)
    cmid.post_send(mr)
    cmid.get_send_comp()
    cmid.get_recv_comp()
    if mr.read(SIZE, 0) != message(2):
        raise AssertionError("the client received other bytes than the server sent")
    cmid.disconnect()
    close(mr, cmid)


# --- UD, asynchronous ----------------------------------------------------------

def ud_qp_attr():
    return QPInitAttr(qp_type=e.IBV_QPT_UD, cap=QPCap(max_send_wr=2, max_recv_wr=2))


def ud_server(port, ready):
    channel = CMEventChannel()
    listener = CMID(creator=channel, port_space=ce.RDMA_PS_UDP)
    listener.bind_addr(AddrInfo(src=SERVER, src_service=str(port), port_space=ce.RDMA_PS_UDP,
                                flags=ce.RAI_PASSIVE))
    listener.listen()
    ready.set()
    event = CMEvent(channel)
    expect(event, ce.RDMA_CM_EVENT_CONNECT_REQUEST)
    child = CMID(creator=event, listen_id=listener)
    event.ack_cm_event()
    child.create_qp(ud_qp_attr())
    mr = child.reg_msgs(SIZE + GRH)
    child.post_recv(mr)
    child.accept(ConnParam(qp_num=child.qpn))
    wc = child.get_recv_comp()
    if mr.read(SIZE, GRH) != message(3):
        raise AssertionError("the UD server received other bytes than the client sent")
    # The answer goes where the datagram came from.
    ah = AH(child.pd, wc=wc, port_num=1, grh=mr.buf)
    mr.write(message(4), SIZE)
    child.post_ud_send(mr, ah, rqpn=wc.src_qp, length=SIZE)
    child.get_send_comp()
    close(ah, mr, child, listener, channel)


def ud_client(port):
    channel = CMEventChannel()
    cmid = CMID(creator=channel, port_space=ce.RDMA_PS_UDP)
    cmid.resolve_addr(AddrInfo(dst=SERVER, dst_service=str(port), port_space=ce.RDMA_PS_UDP))
    event = CMEvent(channel)
    expect(event, ce.RDMA_CM_EVENT_ADDR_RESOLVED)
    event.ack_cm_event()
    cmid.resolve_route()
    event = CMEvent(channel)
    expect(event, ce.RDMA_CM_EVENT_ROUTE_RESOLVED)
    event.ack_cm_event()
    cmid.create_qp(ud_qp_attr())
    mr = cmid.reg_msgs(SIZE + GRH)
    cmid.post_recv(mr)
    cmid.connect(ConnParam(qp_num=cmid.qpn))
    event = CMEvent(channel)
    expect(event, ce.RDMA_CM_EVENT_ESTABLISHED)
    params = UDParam(event)
    event.ack_cm_event()
    if params.qkey != 0x01234567:
        raise AssertionError("UD Q_Key %#x, rdma_cm's is 0x01234567" % params.qkey)
    ah = AH(cmid.pd, attr=params.ah_attr)
    mr.write(message(3), SIZE)
    cmid.post_ud_send(mr, ah, rqpn=params.qp_num, length=SIZE)
    cmid.get_send_comp()
    cmid.get_recv_comp()
    if mr.read(SIZE, GRH) != message(4):
        raise AssertionError("the UD client received other bytes than the server sent")
    close(ah, mr, cmid, channel)


def run(name, server, client, port):
    ready = mp.Event()
    child = mp.Process(target=server, args=(port, ready))
    child.start()
    if not ready.wait(30):
        raise AssertionError("%s server did not listen" % name)
    client(port)
    child.join(30)
    if child.exitcode != 0:
        raise AssertionError("%s server exited with %s" % (name, child.exitcode))
    print("%s ok" % name)


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 7471
    run("rc", rc_server, rc_client, port)
    run("ud", ud_server, ud_client, port + 1)


if __name__ == "__main__":
    main()

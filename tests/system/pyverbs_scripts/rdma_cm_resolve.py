"""Resolves the IPv4 address given on the command line with librdmacm
(through ctypes: pyverbs does not expose an event's status) and prints the
event that answers as 'event N status S', or 'errno N' when
rdma_resolve_addr fails at once."""

import ctypes
import ctypes.util
import socket
import struct
import sys

RDMA_PS_TCP = 0x0106


class SockaddrIn(ctypes.Structure):
    _fields_ = [("family", ctypes.c_ushort), ("port", ctypes.c_uint16),
                ("addr", ctypes.c_uint32), ("zero", ctypes.c_uint8 * 8)]


class CmEvent(ctypes.Structure):  # the head of struct rdma_cm_event
    _fields_ = [("id", ctypes.c_void_p), ("listen_id", ctypes.c_void_p),
                ("event", ctypes.c_int), ("status", ctypes.c_int)]


cm = ctypes.CDLL(ctypes.util.find_library("rdmacm"), use_errno=True)
cm.rdma_create_event_channel.restype = ctypes.c_void_p
cm.rdma_create_id.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p,
                              ctypes.c_int]
cm.rdma_resolve_addr.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
cm.rdma_get_cm_event.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.POINTER(CmEvent))]
cm.rdma_ack_cm_event.argtypes = [ctypes.POINTER(CmEvent)]
cm.rdma_destroy_id.argtypes = [ctypes.c_void_p]

channel = cm.rdma_create_event_channel()
cmid = ctypes.c_void_p()
if not channel or cm.rdma_create_id(channel, ctypes.byref(cmid), None, RDMA_PS_TCP) != 0:
    sys.exit("cannot create an rdma_cm ID: errno %d" % ctypes.get_errno())
dst = SockaddrIn(socket.AF_INET, socket.htons(7000),
                 struct.unpack("=I", socket.inet_aton(sys.argv[1]))[0])
if cm.rdma_resolve_addr(cmid, None, ctypes.byref(dst), 2000) != 0:
    print("errno %d" % ctypes.get_errno())
else:
    event = ctypes.POINTER(CmEvent)()
    if cm.rdma_get_cm_event(channel, ctypes.byref(event)) != 0:
        sys.exit("rdma_get_cm_event failed: errno %d" % ctypes.get_errno())
    print("event %d status %d" % (event.contents.event, event.contents.status))
    cm.rdma_ack_cm_event(event)
cm.rdma_destroy_id(cmid)

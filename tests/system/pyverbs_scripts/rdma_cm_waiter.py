"""An rdma_cm program that waits for its next event in rdma_get_cm_event
(blocking): resolves 127.0.0.2, prints 'ready', then prints the number of
the event that ends the wait ('event N'), or the errno of the failure that
does ('errno N'). For tests that take the daemon away meanwhile."""

from checks import ce
from pyverbs.cmid import AddrInfo, CMEvent, CMEventChannel, CMID
from pyverbs.pyverbs_error import PyverbsRDMAError

channel = CMEventChannel()
cmid = CMID(creator=channel, port_space=ce.RDMA_PS_TCP)
cmid.resolve_addr(AddrInfo(dst="127.0.0.2", dst_service="7000", port_space=ce.RDMA_PS_TCP))
event = CMEvent(channel)
assert event.event_type == ce.RDMA_CM_EVENT_ADDR_RESOLVED, event.event_type
event.ack_cm_event()
print("ready", flush=True)
try:
    event = CMEvent(channel)
    print("event %d" % event.event_type, flush=True)
    event.ack_cm_event()
except PyverbsRDMAError as error:
    print("errno %d" % error.error_code, flush=True)

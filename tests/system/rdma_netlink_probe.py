"""Speaks RDMA netlink on a NETLINK_RDMA socket (the bridge's in a uroce
environment) and prints, as JSON, what came back for each case, for
test_rdma_tool.py to judge."""

import json
import socket
import struct

NETLINK_RDMA = 20
NLM_F_REQUEST, NLM_F_MULTI, NLM_F_ACK, NLM_F_DUMP = 0x1, 0x2, 0x4, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
CMD_GET, CMD_NEWLINK, CMD_DELLINK, CMD_SYS_GET, CMD_RES_QP_GET = 1, 3, 4, 6, 10
ATTR_DEV_INDEX, ATTR_DEV_NAME = 1, 2


def rdma_type(cmd):
    return (5 << 10) + cmd


def message(cmd, flags, seq, attrs=b""):
    return struct.pack("=IHHII", 16 + len(attrs), rdma_type(cmd), flags, seq, 0) + attrs


def u32_attr(kind, value):
    return struct.pack("=HHI", 8, kind, value)


def messages(datagram):
    """(type, flags, seq, pid, payload) of each message."""
    out = []
    while len(datagram) >= 16:
        length, kind, flags, seq, pid = struct.unpack("=IHHII", datagram[:16])
        out.append((kind, flags, seq, pid, datagram[16:length]))
        datagram = datagram[(length + 3) & ~3:]
    return out


def status(payload):
    return struct.unpack("=i", payload[:4])[0]


sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_RDMA)
sock.bind((0, 0))
port, _ = sock.getsockname()
result = {"port": port}


def exchange(datagram, replies=1):
    sock.send(datagram)
    got = []
    for _ in range(replies):
        data, (sender, _) = sock.recvfrom(4096)
        got.append({"sender": sender, "size": len(data), "messages": messages(data)})
    return got


# A doit for a device that does not exist: EINVAL, with the request's seq and our port.
[reply] = exchange(message(CMD_GET, NLM_F_REQUEST | NLM_F_ACK, 11, u32_attr(ATTR_DEV_INDEX, 99)))
kind, flags, seq, pid, payload = reply["messages"][0]
result["unknown_device"] = {"type": kind, "seq": seq, "pid": pid, "error": status(payload),
                            "sender": reply["sender"]}

# A dump for a device that does not exist: NLMSG_DONE carrying EINVAL.
[reply] = exchange(message(CMD_RES_QP_GET, NLM_F_REQUEST | NLM_F_ACK | NLM_F_DUMP, 12,
                           u32_attr(ATTR_DEV_INDEX, 99)))
kind, flags, seq, pid, payload = reply["messages"][0]
result["unknown_device_dump"] = {"type": kind, "flags": flags, "seq": seq, "status": status(payload)}

# A new link without its name, type and netdev, and deleting no device: EINVAL.
[reply] = exchange(message(CMD_NEWLINK, NLM_F_REQUEST | NLM_F_ACK, 13))
result["newlink"] = status(reply["messages"][0][4])
[reply] = exchange(message(CMD_DELLINK, NLM_F_REQUEST | NLM_F_ACK, 13, u32_attr(ATTR_DEV_INDEX, 99)))
result["dellink"] = status(reply["messages"][0][4])

# Without NLM_F_ACK a doit gets its reply alone: the next datagram answers the next request.
replies = exchange(message(CMD_GET, NLM_F_REQUEST, 14, u32_attr(ATTR_DEV_INDEX, 0)))
replies += exchange(message(CMD_SYS_GET, NLM_F_REQUEST | NLM_F_ACK, 15), replies=2)
result["no_ack"] = [[(m[0], m[2]) for m in r["messages"]] for r in replies]

# A header whose length runs past the datagram: EINVAL for that seq.
[reply] = exchange(struct.pack("=IHHII", 1000, rdma_type(CMD_GET), NLM_F_REQUEST, 16, 0))
kind, flags, seq, pid, payload = reply["messages"][0]
result["bad_length"] = {"type": kind, "seq": seq, "error": status(payload)}

# The device dump: one device per message, then NLMSG_DONE.
sock.send(message(CMD_GET, NLM_F_REQUEST | NLM_F_DUMP, 17))
names = []
while True:
    data = sock.recv(4096)
    [(kind, flags, seq, pid, payload)] = messages(data)
    if kind == NLMSG_DONE:
        break
    attrs = {}
    while len(payload) >= 4:
        length, attr = struct.unpack("=HH", payload[:4])
        attrs[attr & 0x3fff] = payload[4:length]
        payload = payload[(length + 3) & ~3:]
    names.append(attrs[ATTR_DEV_NAME].rstrip(b"\0").decode())
result["dump_names"] = names
print(json.dumps(result))

"""RoCEv2 datagrams and IB CM MADs built and read byte by byte, for the tests
that forge them and read them from traces. The layouts are IBA's: BTH and
DETH (vol. 1 ch. 9), the MAD header and the CM messages (ch. 12, 13.4),
rdma_cm's IP addressing in the private data (Annex A11), the ICRC over
the masked pseudo-header (Annex A17). Written from the specification, not
from the daemon's code, so that they check it.
"""

import socket
import struct
import zlib

GSI_QPN = 1
GSI_QKEY = 0x80010000
DEFAULT_PKEY = 0xffff
UD_SEND_ONLY = 0x64

# CM attribute IDs (IBA table 263).
REQ, MRA, REJ, REP, RTU, DREQ, DREP, SIDR_REQ, SIDR_REP = (
    0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18)
MAD_SIZE = 256
MAD_HEADER = 24

# REJ reasons and "message rejected" values.
REJ_TIMEOUT = 4
REJ_CONSUMER = 28
REJECTED_REQ, REJECTED_REP, REJECTED_OTHER = 0, 1, 2

TCP_SERVICE_PREFIX = 0x0000000001060000  # rdma_cm's port space TCP


def icrc_of(src, dst, src_port, dst_port, udp_payload_without_icrc):
    """The RoCEv2 ICRC (IBA A17.4.1) of an IPv4 packet sent with IP ID 0
    and DF, as uroce checks it; stored least significant byte first."""
    udp_length = 8 + len(udp_payload_without_icrc) + 4
    pseudo = (b"\xff" * 8 +
              struct.pack("!BBHHHBBH4s4s", 0x45, 0xff, 20 + udp_length, 0, 0x4000, 0xff, 17,
                          0xffff, socket.inet_aton(src), socket.inet_aton(dst)) +
              struct.pack("!HHHH", src_port, dst_port, udp_length, 0xffff) +
              udp_payload_without_icrc[:4] + b"\xff" + udp_payload_without_icrc[5:])
    return struct.pack("<I", zlib.crc32(pseudo))


def ud_datagram(src, dst, src_port, dst_port, payload, dest_qp=GSI_QPN, qkey=GSI_QKEY,
                src_qp=GSI_QPN, psn=0, pkey=DEFAULT_PKEY):
    """The UDP payload of a UD SEND only from src:src_port to dst:dst_port."""
    bth = struct.pack("!BBHII", UD_SEND_ONLY, 0, pkey, dest_qp & 0xffffff, psn & 0xffffff)
    deth = struct.pack("!II", qkey, src_qp & 0xffffff)
    packet = bth + deth + payload
    return packet + icrc_of(src, dst, src_port, dst_port, packet)


def mad(attribute, message, transaction_id=0x42):
    """A CM MAD: the header (base version 1, class 7, class version 2, Send)
    and the message's bytes, zero-padded to 256."""
    header = struct.pack("!BBBBHHQHHI", 1, 0x07, 2, 0x03, 0, 0, transaction_id, attribute, 0,
                         0)
    return (header + message).ljust(MAD_SIZE, b"\0")[:MAD_SIZE]


def ip_cm_header(src_ip, src_port, dst_ip):
    """rdma_cm's first 36 bytes of REQ private data (IBA A11.6.1): IPv4."""
    mapped = lambda ip: b"\0" * 12 + socket.inet_aton(ip)
    return struct.pack("!BBH", 0, 4 << 4, src_port) + mapped(src_ip) + mapped(dst_ip)


def req(local_comm_id, port, src_ip, dst_ip, local_qpn=0x123, path_mtu=3, ca_guid=0x1111,
        starting_psn=0, src_port=40000):
    """A REQ for an RC connection to rdma_cm's TCP port `port` at dst_ip."""
    m = bytearray(232)
    struct.pack_into("!I", m, 0, local_comm_id)
    struct.pack_into("!Q", m, 8, TCP_SERVICE_PREFIX | port)
    struct.pack_into("!Q", m, 16, ca_guid)
    struct.pack_into("!I", m, 32, (local_qpn & 0xffffff) << 8 | 1)  # responder resources 1
    struct.pack_into("!I", m, 36, 1)  # initiator depth 1
    struct.pack_into("!I", m, 40, 20 << 3)  # remote CM response timeout, RC
    struct.pack_into("!I", m, 44, (starting_psn & 0xffffff) << 8 | 20 << 3 | 7)
    struct.pack_into("!H", m, 48, DEFAULT_PKEY)
    m[50] = (path_mtu & 0xf) << 4 | 7  # RNR retry 7
    m[51] = 15 << 4  # max CM retries
    struct.pack_into("!HH", m, 52, 0xffff, 0xffff)  # permissive LIDs
    m[56:72] = b"\0" * 10 + b"\xff\xff" + socket.inet_aton(src_ip)
    m[72:88] = b"\0" * 10 + b"\xff\xff" + socket.inet_aton(dst_ip)
    m[93] = 64  # hop limit
    m[95] = 17 << 3  # local ACK timeout
    m[140:176] = ip_cm_header(src_ip, src_port, dst_ip)
    return mad(REQ, bytes(m))


def rej(local_comm_id, remote_comm_id, reason, rejected=REJECTED_OTHER, ari=b""):
    m = bytearray(232)
    struct.pack_into("!II", m, 0, local_comm_id, remote_comm_id)
    m[8] = rejected << 6
    m[9] = len(ari) << 1
    struct.pack_into("!H", m, 10, reason)
    m[12:12 + len(ari)] = ari
    return mad(REJ, bytes(m))


def dreq(local_comm_id, remote_comm_id, remote_qpn):
    return mad(DREQ, struct.pack("!III", local_comm_id, remote_comm_id,
                                 (remote_qpn & 0xffffff) << 8))


def two_ids(attribute, local_comm_id, remote_comm_id):
    """A message of only the two communication IDs (RTU, DREP, MRA of a REQ)."""
    return mad(attribute, struct.pack("!II", local_comm_id, remote_comm_id))


# --- reading traces ------------------------------------------------------------

PCAP_RECORD = struct.Struct("<IIII")
FRAME_HEADERS = 14 + 20 + 8  # Ethernet, IPv4, UDP (the daemon's traces)


def cm_mads_in_pcap(path):
    """The CM MADs of a uroce trace, in order: (attribute, message bytes,
    source IPv4, destination IPv4)."""
    with open(path, "rb") as f:
        data = f.read()
    at, found = 24, []
    while at + PCAP_RECORD.size <= len(data):
        _, _, length, _ = PCAP_RECORD.unpack_from(data, at)
        frame = data[at + PCAP_RECORD.size:at + PCAP_RECORD.size + length]
        at += PCAP_RECORD.size + length
        packet = frame[FRAME_HEADERS:]
        if len(packet) < 12 + 8 + MAD_SIZE or packet[0] != UD_SEND_ONLY:
            continue
        if struct.unpack_from("!I", packet, 4)[0] & 0xffffff != GSI_QPN:
            continue
        mad_bytes = packet[20:20 + MAD_SIZE]
        attribute = struct.unpack_from("!H", mad_bytes, 16)[0]
        found.append((attribute, mad_bytes[MAD_HEADER:], socket.inet_ntoa(frame[26:30]),
                      socket.inet_ntoa(frame[30:34])))
    return found

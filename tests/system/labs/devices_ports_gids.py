"""Lab 1: devices, ports and GIDs, as a program sees them.

Lists every RDMA device libibverbs finds, opens it, and prints what
ibv_query_device, ibv_query_port and ibv_query_gid_table return: the node
GUID, port 1's state, MTU and link layer, and the GID table with each
entry's type. Compare with ibv_devinfo -v and `uroce status`.

    build/bin/uroce exec -- python3 tests/system/labs/devices_ports_gids.py
"""

from labkit import options, say
from labkit import e
from pyverbs.device import Context, get_device_list
from pyverbs.utils import mtu_to_str

PORT_STATES = {1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"}
LINK_LAYERS = {0: "unspecified", 1: "InfiniBand", 2: "Ethernet"}
GID_TYPES = {e.IBV_GID_TYPE_IB: "IB", e.IBV_GID_TYPE_ROCE_V1: "RoCE v1",
             e.IBV_GID_TYPE_ROCE_V2: "RoCE v2"}


def guid_text(be64):
    """A node GUID as ibv_devinfo prints it (pyverbs gives the raw big-endian value)."""
    text = "%016x" % int.from_bytes(be64.to_bytes(8, "little"), "big")
    return ":".join(text[i:i + 4] for i in range(0, 16, 4))


def main():
    options("Lab 1: the devices, their port and their GID table.")
    for device in get_device_list():
        name = device.name.decode()
        ctx = Context(name=name)
        attr = ctx.query_device()
        port = ctx.query_port(1)
        say("device %s: node_guid %s, %d port(s)" % (name, guid_text(attr.node_guid),
                                                    attr.phys_port_cnt))
        say("  port 1: state %s, max_mtu %s, active_mtu %s, link_layer %s, gid_tbl_len %d" % (
            PORT_STATES.get(port.state, port.state), mtu_to_str(port.max_mtu),
            mtu_to_str(port.active_mtu), LINK_LAYERS.get(port.link_layer, port.link_layer),
            port.gid_tbl_len))
        for entry in ctx.query_gid_table(port.gid_tbl_len):
            say("  gid %d: %s  %s" % (entry.gid_index, entry.gid_str(),
                                      GID_TYPES.get(entry.gid_type, entry.gid_type)))
        ctx.close()


if __name__ == "__main__":
    main()

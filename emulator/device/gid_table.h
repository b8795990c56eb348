// A RoCE port's GID table, as the kernel keeps one for a netdev (RoCEv2
// GIDs only): slot 0 holds the device's address, slot 1 the interface's
// IPv6 link-local address (on an interface without one, such as lo, one
// made from the node GUID, as a NIC's default GID), and the slots from 2
// the interface's other addresses, each in the slot it got when it came.
// A removed address leaves its slot empty (a zero GID) and the others keep
// their indexes, as programs that hold a GID index expect.
#pragma once

#include <infiniband/verbs.h>
#include <stdint.h>

#include <optional>
#include <string_view>
#include <vector>

#include "wire/ip_address.h"

namespace uroce {

// How the table is shown to programs (sysfs, the GID indexes the verbs
// take): uroce's own (its slots as they are), rxe's (the link-local GID
// first, then the device's address), or mlx5's (each address twice, RoCE
// v1 then v2, the link-local one first: the device's IPv4 GID at index 3).
// The daemon carries RoCE v2 alone; a v1 entry is shown, never used.
enum class GidLayout : uint8_t { kUroce, kRxe, kMlx5 };
std::optional<GidLayout> gid_layout_named(std::string_view name);
const char* gid_layout_name(GidLayout layout);

class GidTable {
  public:
    static constexpr size_t kLength = 16;  // the port's gid_tbl_len

    GidTable(const wire::IpAddress& address, uint64_t node_guid);

    struct Change {
        std::vector<wire::IpAddress> added, removed;
        size_t left_out = 0;  // addresses with no free slot
        bool any() const { return !added.empty() || !removed.empty(); }
    };
    // Makes slots 1 to kLength - 1 hold `addresses` (the interface's,
    // link-local ones too; slot 0's own is skipped): the first link-local
    // one in slot 1, the rest in slots from 2.
    Change follow(const std::vector<wire::IpAddress>& addresses);

    // Every slot up to the last one used; empty ones are zero GIDs.
    const std::vector<ibv_gid>& gids() const { return gids_; }
    // Slot `index`'s address; nothing for an empty slot or one beyond.
    std::optional<wire::IpAddress> address(size_t index) const;
    // Slot `index`'s address when it is one of the interface's (the device's
    // own and the made link-local GID are not).
    std::optional<wire::IpAddress> interface_address(size_t index) const;
    // The slot that holds `address`.
    std::optional<size_t> index_of(const wire::IpAddress& address) const;

    // One entry of the table as `layout` shows it: its GID and type, and
    // for a RoCE v2 entry the slot it stands for.
    struct Shown {
        ibv_gid gid{};  // zero: an empty entry
        ibv_gid_type type = IBV_GID_TYPE_ROCE_V2;
        std::optional<size_t> slot;
    };
    // Every entry up to the last one used, at most kLength.
    std::vector<Shown> shown(GidLayout layout) const;
    // The index under `layout` of slot `slot`'s RoCE v2 entry.
    static size_t shown_index(GidLayout layout, size_t slot);

  private:
    void put(size_t index, const wire::IpAddress& address);
    void clear(size_t index);

    std::vector<ibv_gid> gids_;
    ibv_gid made_link_local_{};  // slot 1 while the interface has no link-local address
};

}  // namespace uroce

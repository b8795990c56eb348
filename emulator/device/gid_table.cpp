#include "device/gid_table.h"

#include <endian.h>
#include <string.h>

#include <algorithm>

namespace uroce {
namespace {

ibv_gid gid_of(const wire::IpAddress& address) {
    ibv_gid gid{};
    memcpy(gid.raw, address.bytes().data(), sizeof(gid.raw));
    return gid;
}

bool empty(const ibv_gid& gid) {
    return std::all_of(std::begin(gid.raw), std::end(gid.raw), [](uint8_t b) { return b == 0; });
}

// Where slot `slot` comes in rxe's and mlx5's order: the link-local GID
// (slot 1) first, then the device's own address (slot 0).
size_t position(size_t slot) {
    return slot < 2 ? 1 - slot : slot;
}

}  // namespace

std::optional<GidLayout> gid_layout_named(std::string_view name) {
    for (GidLayout layout : {GidLayout::kUroce, GidLayout::kRxe, GidLayout::kMlx5}) {
        if (name == gid_layout_name(layout)) {
            return layout;
        }
    }
    return std::nullopt;
}

const char* gid_layout_name(GidLayout layout) {
    switch (layout) {
        case GidLayout::kRxe:
            return "rxe";
        case GidLayout::kMlx5:
            return "mlx5";
        case GidLayout::kUroce:
            break;
    }
    return "uroce";
}

size_t GidTable::shown_index(GidLayout layout, size_t slot) {
    switch (layout) {
        case GidLayout::kRxe:
            return position(slot);
        case GidLayout::kMlx5:
            return 2 * position(slot) + 1;
        case GidLayout::kUroce:
            break;
    }
    return slot;
}

std::vector<GidTable::Shown> GidTable::shown(GidLayout layout) const {
    std::vector<Shown> entries;
    for (size_t slot = 0; slot < gids_.size(); ++slot) {
        const size_t index = shown_index(layout, slot);
        if (index >= kLength || empty(gids_[slot])) {
            continue;  // mlx5's two entries an address leave room for 8
        }
        entries.resize(std::max(entries.size(), index + 1));
        entries[index] = {gids_[slot], IBV_GID_TYPE_ROCE_V2, slot};
        if (layout == GidLayout::kMlx5) {
            entries[index - 1] = {gids_[slot], IBV_GID_TYPE_ROCE_V1, std::nullopt};
        }
    }
    return entries;
}

GidTable::GidTable(const wire::IpAddress& address, uint64_t node_guid) {
    made_link_local_.global.subnet_prefix = htobe64(0xfe80000000000000ull);
    made_link_local_.global.interface_id = htobe64(node_guid);
    gids_ = {gid_of(address), made_link_local_};
}

std::optional<wire::IpAddress> GidTable::address(size_t index) const {
    if (index >= gids_.size() || empty(gids_[index])) {
        return std::nullopt;
    }
    return wire::IpAddress(gids_[index].raw);
}

std::optional<wire::IpAddress> GidTable::interface_address(size_t index) const {
    if (index == 0 || index >= gids_.size() ||
        memcmp(gids_[index].raw, made_link_local_.raw, sizeof(made_link_local_.raw)) == 0) {
        return std::nullopt;
    }
    return address(index);
}

std::optional<size_t> GidTable::index_of(const wire::IpAddress& address) const {
    for (size_t i = 0; i < gids_.size(); ++i) {
        if (memcmp(gids_[i].raw, address.bytes().data(), sizeof(gids_[i].raw)) == 0) {
            return i;
        }
    }
    return std::nullopt;
}

void GidTable::put(size_t index, const wire::IpAddress& address) {
    if (gids_.size() <= index) {
        gids_.resize(index + 1);
    }
    gids_[index] = gid_of(address);
}

void GidTable::clear(size_t index) {
    gids_[index] = ibv_gid{};
    while (gids_.size() > 2 && empty(gids_.back())) {
        gids_.pop_back();
    }
}

GidTable::Change GidTable::follow(const std::vector<wire::IpAddress>& addresses) {
    Change change;
    const wire::IpAddress own(gids_[0].raw);
    const auto link_local = std::find_if(addresses.begin(), addresses.end(), [&](const auto& a) {
        return a.link_local() && !a.is_v4() && a != own;
    });
    // Slot 1: the interface's link-local address, or the made one.
    const ibv_gid slot1 = link_local != addresses.end() ? gid_of(*link_local) : made_link_local_;
    if (memcmp(slot1.raw, gids_[1].raw, sizeof(slot1.raw)) != 0) {
        if (memcmp(gids_[1].raw, made_link_local_.raw, sizeof(slot1.raw)) != 0) {
            change.removed.emplace_back(gids_[1].raw);
        }
        gids_[1] = slot1;
        if (link_local != addresses.end()) {
            change.added.push_back(*link_local);
        }
    }
    auto wanted = [&](const wire::IpAddress& a) {
        return a != own && (link_local == addresses.end() || a != *link_local);
    };
    for (size_t i = 2; i < gids_.size(); ++i) {
        if (empty(gids_[i])) {
            continue;
        }
        const wire::IpAddress held(gids_[i].raw);
        if (std::find(addresses.begin(), addresses.end(), held) == addresses.end()) {
            change.removed.push_back(held);
            clear(i);
        }
    }
    for (const wire::IpAddress& a : addresses) {
        if (!wanted(a) || index_of(a)) {
            continue;
        }
        size_t slot = 2;
        while (slot < gids_.size() && !empty(gids_[slot])) {
            ++slot;
        }
        if (slot >= kLength) {
            ++change.left_out;
            continue;
        }
        put(slot, a);
        change.added.push_back(a);
    }
    return change;
}

}  // namespace uroce

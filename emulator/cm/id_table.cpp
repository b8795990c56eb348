#include "cm/id_table.h"

#include <sys/random.h>

#include <algorithm>

#include "cm/address.h"
#include "cm/connection_manager.h"

namespace uroce::cm {
namespace {

uint32_t random32() {
    uint32_t value = 0;
    while (getrandom(&value, sizeof(value), 0) != sizeof(value)) {
    }
    return value;
}

}  // namespace

IdTable::IdTable() = default;
IdTable::~IdTable() = default;

size_t IdTable::PeerKeyHash::operator()(const PeerKey& key) const {
    const uint64_t mixed =
        (std::hash<wire::IpAddress>()(key.ip) ^ key.comm_id) * 0x9e3779b97f4a7c15ull;
    return std::hash<uint64_t>()(mixed ^ reinterpret_cast<uintptr_t>(key.device));
}

Id* IdTable::find(uint32_t handle) const {
    auto it = ids_.find(handle);
    return it == ids_.end() ? nullptr : it->second.get();
}

Id& IdTable::add(std::unique_ptr<Id> id) {
    while (next_handle_ == 0 || ids_.count(next_handle_)) {
        ++next_handle_;
    }
    id->handle = next_handle_++;
    Id& ref = *id;
    by_channel_[ref.channel].insert(ref.handle);
    ++per_client_[ref.channel->pid];
    ids_.emplace(ref.handle, std::move(id));
    return ref;
}

void IdTable::remove(Id& id) {
    forget_connection(id);
    if (auto it = listeners_.find({id.bound_ps, port_of(id.src)}); it != listeners_.end()) {
        std::erase(it->second, id.handle);
        if (it->second.empty()) {
            listeners_.erase(it);
        }
    }
    if (auto it = by_channel_.find(id.channel); it != by_channel_.end()) {
        it->second.erase(id.handle);
        if (it->second.empty()) {
            by_channel_.erase(it);
        }
    }
    if (auto it = per_client_.find(id.channel->pid); it != per_client_.end() && --it->second == 0) {
        per_client_.erase(it);
    }
    ids_.erase(id.handle);
}

std::vector<uint32_t> IdTable::of_channel(const Channel& channel) const {
    auto it = by_channel_.find(&channel);
    if (it == by_channel_.end()) {
        return {};
    }
    std::vector<uint32_t> handles(it->second.begin(), it->second.end());
    std::sort(handles.begin(), handles.end());
    return handles;
}

void IdTable::move_to_channel(Id& id, Channel& to) {
    const uint32_t handle = id.handle;
    auto it = by_channel_.find(id.channel);
    if (it != by_channel_.end()) {
        it->second.erase(handle);
        if (it->second.empty()) {
            by_channel_.erase(it);
        }
    }
    if (auto held = per_client_.find(id.channel->pid);
        held != per_client_.end() && --held->second == 0) {
        per_client_.erase(held);
    }
    id.channel = &to;
    by_channel_[&to].insert(handle);
    ++per_client_[to.pid];
}

size_t IdTable::held_by(pid_t pid) const {
    auto it = per_client_.find(pid);
    return it == per_client_.end() ? 0 : it->second;
}

void IdTable::assign_comm_id(Id& id) {
    release_comm_id(id);
    uint32_t comm_id;
    do {
        comm_id = random32();
    } while (comm_id == 0 || comm_ids_.count(comm_id));
    id.local_comm_id = comm_id;
    comm_ids_[comm_id] = id.handle;
}

void IdTable::release_comm_id(Id& id) {
    if (id.local_comm_id) {
        auto it = comm_ids_.find(id.local_comm_id);
        if (it != comm_ids_.end() && it->second == id.handle) {
            comm_ids_.erase(it);
        }
        id.local_comm_id = 0;
    }
}

Id* IdTable::by_comm_id(uint32_t local_comm_id) const {
    auto it = comm_ids_.find(local_comm_id);
    return it == comm_ids_.end() ? nullptr : find(it->second);
}

void IdTable::forget_connection(Id& id) {
    release_comm_id(id);
    unindex(peers_, id);
    unindex(sidr_requests_, id);
}

IdTable::PeerKey IdTable::peer_key(const Id& id) {
    return {id.device, id.peer_ip, id.remote_comm_id};
}

void IdTable::unindex(PeerIndex& index, const Id& id) {
    auto it = index.find(peer_key(id));
    if (it != index.end() && it->second == id.handle) {
        index.erase(it);
    }
}

void IdTable::index_peer(Id& id) {
    peers_[peer_key(id)] = id.handle;
}

Id* IdTable::indexed(const PeerIndex& index, const PeerKey& key) const {
    auto it = index.find(key);
    Id* id = it == index.end() ? nullptr : find(it->second);
    // Still what it was indexed as (an ID may have connected again since).
    return id && peer_key(*id) == key ? id : nullptr;
}

Id* IdTable::by_peer(const Device* device, const wire::IpAddress& ip,
                     uint32_t remote_comm_id) const {
    Id* id = indexed(peers_, {device, ip, remote_comm_id});
    return id && id->has_cm ? id : nullptr;
}

void IdTable::index_sidr_request(Id& id) {
    sidr_requests_[peer_key(id)] = id.handle;
}

Id* IdTable::sidr_request(const Device* device, const wire::IpAddress& ip,
                          uint32_t request_id) const {
    Id* id = indexed(sidr_requests_, {device, ip, request_id});
    return id && id->cm == CmState::kSidrReqRcvd ? id : nullptr;
}

void IdTable::index_listener(Id& id) {
    listeners_[{id.bound_ps, port_of(id.src)}].push_back(id.handle);
}

std::vector<Id*> IdTable::listeners(uint16_t ps, uint16_t port) const {
    std::vector<Id*> found;
    auto it = listeners_.find({ps, port});
    if (it != listeners_.end()) {
        for (uint32_t handle : it->second) {
            if (Id* id = find(handle)) {
                found.push_back(id);
            }
        }
    }
    return found;
}

}  // namespace uroce::cm

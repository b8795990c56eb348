// Every rdma_cm ID of the daemon, and the indexes through which a command
// or an arriving MAD finds its ID in constant time: by handle, by channel,
// by this side's communication ID, by the peer (its device, address and
// communication ID), a SIDR request by its sender, listeners by port, and
// how many IDs each client holds. Nothing here walks all IDs: a MAD costs
// the same with 65,536 IDs alive as with none.
#pragma once

#include <stdint.h>
#include <sys/types.h>

#include <map>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "wire/ip_address.h"

namespace uroce {
class Device;
}

namespace uroce::cm {

struct Id;
struct Channel;

class IdTable {
  public:
    IdTable();
    ~IdTable();

    // By handle, in handle order (RDMA netlink dumps and status list them so).
    const std::map<uint32_t, std::unique_ptr<Id>>& all() const { return ids_; }
    size_t size() const { return ids_.size(); }
    Id* find(uint32_t handle) const;
    // Gives the ID a free handle and files it under its channel.
    Id& add(std::unique_ptr<Id> id);
    // Out of every index, then gone.
    void remove(Id& id);

    // The IDs of a channel, and the IDs a client's channels hold.
    std::vector<uint32_t> of_channel(const Channel& channel) const;
    void move_to_channel(Id& id, Channel& to);
    size_t held_by(pid_t pid) const;
    const std::unordered_map<pid_t, size_t>& clients() const { return per_client_; }

    // This side's communication ID: drawn at random (unguessable from
    // another connection's), never 0, unique among live IDs.
    void assign_comm_id(Id& id);
    void release_comm_id(Id& id);
    Id* by_comm_id(uint32_t local_comm_id) const;

    // A connection by its peer: the device it arrives at, the peer's
    // address and the peer's communication ID (id.remote_comm_id, which the
    // caller sets first).
    void index_peer(Id& id);
    Id* by_peer(const Device* device, const wire::IpAddress& ip, uint32_t remote_comm_id) const;
    // Out of the indexes of its connection (comm ID, peer, SIDR request).
    void forget_connection(Id& id);
    // A SIDR request waiting for its program, by its sender and request ID.
    void index_sidr_request(Id& id);
    Id* sidr_request(const Device* device, const wire::IpAddress& ip, uint32_t request_id) const;

    // The listening IDs of (port space, port): a handful at most.
    void index_listener(Id& id);
    std::vector<Id*> listeners(uint16_t ps, uint16_t port) const;

  private:
    struct PeerKey {
        const Device* device;
        wire::IpAddress ip;
        uint32_t comm_id;
        bool operator==(const PeerKey&) const = default;
    };
    struct PeerKeyHash {
        size_t operator()(const PeerKey& key) const;
    };
    using PeerIndex = std::unordered_map<PeerKey, uint32_t, PeerKeyHash>;
    static PeerKey peer_key(const Id& id);
    Id* indexed(const PeerIndex& index, const PeerKey& key) const;
    void unindex(PeerIndex& index, const Id& id);

    std::map<uint32_t, std::unique_ptr<Id>> ids_;
    uint32_t next_handle_ = 1;
    std::unordered_map<const Channel*, std::unordered_set<uint32_t>> by_channel_;
    std::unordered_map<pid_t, size_t> per_client_;
    std::unordered_map<uint32_t, uint32_t> comm_ids_;  // local comm ID -> handle
    PeerIndex peers_;
    PeerIndex sidr_requests_;
    std::map<std::pair<uint16_t, uint16_t>, std::vector<uint32_t>> listeners_;
};

}  // namespace uroce::cm

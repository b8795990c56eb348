// The events of an rdma_cm channel: queued, reported, taken by GET_EVENT,
// and moved with an ID to another channel (MIGRATE_ID).
#include <arpa/inet.h>
#include <endian.h>
#include <infiniband/ib.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>

#include "cm/connection_manager.h"
#include "cm/internal.h"
#include "util/log.h"
#include "wire/byte_order.h"
#include "wire/headers.h"

namespace uroce::cm {

using namespace internal;

// ---- events --------------------------------------------------------------

bool ConnectionManager::queue_event(Channel& channel, const Channel::Event& event) {
    if (channel.events.size() >= Channel::kMaxEvents) {
        log_warn("rdma_cm channel of pid %d holds %zu events nobody took: event %u lost",
                 channel.pid, channel.events.size(), event.resp.event);
        return false;
    }
    channel.events.push_back(event);
    update_readiness(channel);
    return true;
}

bool ConnectionManager::report(Id& id, rdma_cm_event_type event, int32_t status,
                               const std::function<void(rdma_ucm_event_resp&)>& fill) {
    if (!id.reporting) {
        return false;  // a connection request's ID before ACCEPT (ucma drops these)
    }
    Channel::Event entry = event_of(id, event, static_cast<uint32_t>(status));
    if (fill) {
        fill(entry.resp);
    }
    return queue_event(*id.channel, entry);
}

// The program's descriptor is readable exactly while events wait: the pipe
// holds one byte then, none otherwise. What the pipe holds is asked each
// time, so a program that took the byte itself is put right at the next
// change, and the daemon never waits on the pipe.
void ConnectionManager::update_readiness(Channel& channel) {
    const bool waiting = !channel.events.empty();
    const bool shown = channel.readiness.queued() > 0;
    if (waiting && !shown) {
        const uint8_t byte = 1;
        channel.readiness.write_record(&byte, 1);
    } else if (!waiting && shown) {
        channel.readiness.drain();
    }
}

Result ConnectionManager::get_event(Channel& channel, rdma_ucm_event_resp& resp) {
    if (channel.events.empty()) {
        update_readiness(channel);
        return fail(EAGAIN, "no rdma_cm event waits");
    }
    const Channel::Event event = channel.events.front();
    channel.events.pop_front();
    update_readiness(channel);
    resp = event.resp;
    if (Id* owner = ids_.find(event.owner)) {
        ++owner->events_reported;
        if (event.new_id) {
            ++owner->backlog;  // the request is the program's now
        }
    }
    if (auto it = multicasts_.find(event.multicast); event.multicast && it != multicasts_.end()) {
        ++it->second.events_reported;
    }
    return ok();
}

Result ConnectionManager::migrate(Id& id, Channel& to, uint32_t& events_reported) {
    Channel& from = *id.channel;
    if (&from != &to) {
        std::deque<Channel::Event> moving;
        std::erase_if(from.events, [&](const Channel::Event& event) {
            if (event.owner == id.handle) {
                moving.push_back(event);
                return true;
            }
            return false;
        });
        if (to.events.size() + moving.size() > Channel::kMaxEvents) {
            from.events.insert(from.events.end(), moving.begin(), moving.end());
            return fail(ENOMEM, "MIGRATE_ID: the destination channel has no room for the events");
        }
        to.events.insert(to.events.end(), moving.begin(), moving.end());
        ids_.move_to_channel(id, to);
        update_readiness(from);
        update_readiness(to);
    }
    events_reported = id.events_reported;
    return ok();
}

}  // namespace uroce::cm

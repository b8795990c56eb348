// What bridge_rdma_cm_helper and the fake daemon of bridge_rdma_cm_test
// agree on: the values the helper sends and the answers it expects.
#pragma once

#include <stdint.h>

namespace bridge_rdma_cm {

// CREATE_ID: the daemon checks these and answers id kCreatedId.
inline constexpr uint64_t kUid = 0x1122334455667788;
inline constexpr uint32_t kCreatedId = 42;

// GET_EVENT, once an event waits: the event the daemon answers.
inline constexpr uint64_t kEventUid = 0xabc;
inline constexpr uint32_t kEventId = 7;
inline constexpr uint32_t kEvent = 9;  // RDMA_CM_EVENT_ESTABLISHED

// MIGRATE_ID: events_reported in the response.
inline constexpr uint32_t kEventsReported = 5;

// SET_OPTION: the TOS byte the helper sets.
inline constexpr uint8_t kTos = 0x2a;

// NOTIFY's `event` asks the fake daemon for these instead.
enum Action : uint32_t {
    kArmEvent = 1000,     // an event waits 200 ms from now (the eventfd becomes readable)
    kFirstClosed = 1001,  // answers 0 if the first channel's connection is closed, else EBUSY
    kHangUp = 1002,       // closes this connection without an answer
};

}  // namespace bridge_rdma_cm

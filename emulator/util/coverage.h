// The device's coverage (docs/fuzzing.md#coverage): how often the daemon
// exercised each behaviour of a fixed map, for fuzzers that steer by what
// the device did, not only by what their program did. Each area is a block
// of ids; an entry's id never changes (the map's names and its listing are
// in control/coverage_map.cpp). A hit is one relaxed atomic increment,
// cheap enough for the data path; the counts are read and cleared by
// `uroce coverage` and handed to an AFL++ map by `uroce exec`.
#pragma once

#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>

#include <array>
#include <atomic>
#include <span>

#include "uroce_abi.h"

namespace uroce::coverage {

enum class Area : uint8_t {
    kQpTransition,       // QP type × from state × to state × outcome
    kWorkRequest,        // QP type × work-request opcode (ibv_wr_opcode, then a receive)
    kPacketSent,         // BTH opcode byte
    kPacketReceived,     // BTH opcode byte
    kResponder,          // ResponderOutcome
    kCompletion,         // completion opcode × ibv_wc_status
    kAsyncEvent,         // ibv_event_type
    kCmMessageSent,      // CmMessage
    kCmMessageReceived,  // CmMessage
    kCmState,            // IB CM state from × to (cm::CmState)
    kCmIdState,          // rdma_cm ID state from × to (cm::IdState)
    kRefusal,            // request op (rpc::Op) × RefusalErrno
    kCount,
};

inline constexpr uint32_t kQpTypes = 6;   // RC, UC, UD, RAW_PACKET, XRC_SEND, XRC_RECV
inline constexpr uint32_t kQpStates = 7;  // IBV_QPS_RESET .. IBV_QPS_ERR

// What became of an ibv_modify_qp (or a transition the transport made).
enum class QpOutcome : uint8_t {
    kAccepted,
    kNotAllowed,        // no such transition for the type
    kMissingAttribute,  // a required attribute was not given
    kExtraAttribute,    // an attribute the transition does not take
    kBadValue,          // an attribute's value out of range
    kRefused,           // refused for another reason (EPERM, EOPNOTSUPP)
    kCount,
};

inline constexpr uint32_t kWrOpcodes = UROCE_WR_ATOMIC_WRITE + 2;  // the last: a receive
inline constexpr uint32_t kWrReceive = kWrOpcodes - 1;

// What the responder did with a request (IBA 9.7.5).
enum class ResponderOutcome : uint8_t {
    kAck,
    kRnrNak,
    kNakPsnSequenceError,  // kNak + wire::NakCode, in its order
    kNakInvalidRequest,
    kNakRemoteAccessError,
    kNakRemoteOperationalError,
    kNakInvalidRdRequest,
    kAtomicAck,
    kReadResponse,
    kDuplicate,            // a request answered again
    kInvalidRequestError,  // transport::RequestError, in its order
    kRemoteAccessError,
    kRemoteOperationalError,
    kUnreliableMessageDropped,  // UC: a gap, an RNR or an error loses the message
    kDatagramDelivered,
    kDatagramDropped,  // UD: no receive WQE, or it does not fit
    kCount,
};

// A completion's opcode: ibv_wc_opcode 0..15, then IBV_WC_RECV + 0..15.
inline constexpr uint32_t kWcOpcodes = 32;
inline constexpr uint32_t kWcStatuses = IBV_WC_TM_RNDV_INCOMPLETE + 1;
inline constexpr uint32_t kAsyncEvents = 32;

// CM MADs by attribute: REQ (0x10) .. APR (0x1A), then any other.
inline constexpr uint32_t kCmMessages = 12;
inline constexpr uint32_t kCmStates = 13;    // cm::CmState
inline constexpr uint32_t kCmIdStates = 10;  // cm::IdState

inline constexpr uint32_t kOps = 128;  // rpc::Op values
// The errnos refusals are told apart by; the last is any other.
inline constexpr std::array<int, 19> kRefusalErrnos = {
    EPERM,  ENOENT, EIO,    E2BIG,  EBADF,  EAGAIN, ENOMEM,     EACCES, EFAULT, EBUSY,
    EEXIST, ENODEV, EINVAL, EMFILE, ENOSPC, ERANGE, EOPNOTSUPP, EPROTO, ENOSYS};
inline constexpr uint32_t kRefusalClasses = kRefusalErrnos.size() + 1;

// Each area's size, in Area's order.
inline constexpr std::array<uint32_t, static_cast<size_t>(Area::kCount)> kAreaSizes = {
    kQpTypes * kQpStates * kQpStates * static_cast<uint32_t>(QpOutcome::kCount),
    kQpTypes* kWrOpcodes,
    256,
    256,
    static_cast<uint32_t>(ResponderOutcome::kCount),
    kWcOpcodes* kWcStatuses,
    kAsyncEvents,
    kCmMessages,
    kCmMessages,
    kCmStates* kCmStates,
    kCmIdStates* kCmIdStates,
    kOps* kRefusalClasses,
};

constexpr uint32_t first_id(Area area) {
    uint32_t id = 0;
    for (size_t i = 0; i < static_cast<size_t>(area); ++i) {
        id += kAreaSizes[i];
    }
    return id;
}
inline constexpr uint32_t kIds = first_id(Area::kCount);

// The daemon's counts, one per id.
class Counts {
  public:
    void hit(uint32_t id) {
        if (id < kIds) {
            counts_[id].fetch_add(1, std::memory_order_relaxed);
        }
    }
    uint32_t count(uint32_t id) const { return counts_[id].load(std::memory_order_relaxed); }
    // The count, set to 0 at once (no hit between the read and the clear is lost).
    uint32_t take(uint32_t id) { return counts_[id].exchange(0, std::memory_order_relaxed); }
    void clear() {
        for (auto& count : counts_) {
            count.store(0, std::memory_order_relaxed);
        }
    }

  private:
    std::array<std::atomic<uint32_t>, kIds> counts_{};
};

// The daemon's one map: every engine thread and the control plane count in it.
Counts& counts();

// The map of the case (UROCE_CASE) whose work this thread is doing, if any
// (a CaseScope, util/case_tag.h): a hit counts there too.
inline thread_local Counts* case_counts = nullptr;

// A hit the daemon's map alone takes: what arrives, before the QP or ID
// it is for (and so its case) is known; a local peer's packet arrives
// while the sender's case is this thread's.
inline void arrival_hit(Area area, uint32_t index) {
    if (index < kAreaSizes[static_cast<size_t>(area)]) {
        counts().hit(first_id(area) + index);
    }
}

// The same hit as the case of the thread's work sees it, once its QP or ID
// is known: its map alone.
inline void case_hit(Area area, uint32_t index) {
    Counts* mine = case_counts;
    if (mine && index < kAreaSizes[static_cast<size_t>(area)]) {
        mine->hit(first_id(area) + index);
    }
}

inline void hit(Area area, uint32_t index) {
    arrival_hit(area, index);
    case_hit(area, index);
}

// While one lives, this thread's hits count in `map` too (null: none).
class CaseScope {
  public:
    explicit CaseScope(Counts* map) : outer_(case_counts) { case_counts = map; }
    ~CaseScope() { case_counts = outer_; }
    CaseScope(const CaseScope&) = delete;
    CaseScope& operator=(const CaseScope&) = delete;

  private:
    Counts* outer_;
};

// RC 0, UC 1, UD 2, RAW_PACKET 3, XRC_SEND 4, XRC_RECV 5; kQpTypes for others.
constexpr uint32_t qp_type_index(ibv_qp_type type) {
    switch (type) {
        case IBV_QPT_RC:
            return 0;
        case IBV_QPT_UC:
            return 1;
        case IBV_QPT_UD:
            return 2;
        case IBV_QPT_RAW_PACKET:
            return 3;
        case IBV_QPT_XRC_SEND:
            return 4;
        case IBV_QPT_XRC_RECV:
            return 5;
        default:
            return kQpTypes;
    }
}

inline void qp_transition(ibv_qp_type type, ibv_qp_state from, ibv_qp_state to, QpOutcome outcome) {
    const uint32_t t = qp_type_index(type);
    if (t < kQpTypes && uint32_t(from) < kQpStates && uint32_t(to) < kQpStates) {
        hit(Area::kQpTransition,
            ((t * kQpStates + from) * kQpStates + to) * uint32_t(QpOutcome::kCount) +
                uint32_t(outcome));
    }
}

// `opcode`: an ibv_wr_opcode, or kWrReceive.
inline void work_request(ibv_qp_type type, uint32_t opcode) {
    const uint32_t t = qp_type_index(type);
    if (t < kQpTypes && opcode < kWrOpcodes) {
        hit(Area::kWorkRequest, t * kWrOpcodes + opcode);
    }
}

inline void responder(ResponderOutcome outcome) {
    hit(Area::kResponder, static_cast<uint32_t>(outcome));
}

constexpr uint32_t wc_opcode_index(uint32_t opcode) {
    return opcode < 16                                          ? opcode
           : opcode >= IBV_WC_RECV && opcode < IBV_WC_RECV + 16 ? 16 + opcode - IBV_WC_RECV
                                                                : kWcOpcodes;
}

inline void completion(uint32_t opcode, uint32_t status) {
    const uint32_t o = wc_opcode_index(opcode);
    if (o < kWcOpcodes && status < kWcStatuses) {
        hit(Area::kCompletion, o * kWcStatuses + status);
    }
}

inline void async_event(uint32_t event) {
    hit(Area::kAsyncEvent, event);
}

inline void packet(bool sent, uint8_t opcode) {
    if (sent) {
        hit(Area::kPacketSent, opcode);
    } else {
        arrival_hit(Area::kPacketReceived, opcode);
    }
}

// A received packet, as its QP's case sees it: the daemon counted it on
// arrival.
inline void packet_delivered(uint8_t opcode) {
    case_hit(Area::kPacketReceived, opcode);
}

// A CM attribute ID's entry: REQ (0x10) .. APR (0x1A), the last for any other.
constexpr uint32_t cm_attribute_index(uint32_t attribute) {
    return attribute >= 0x10 && attribute < 0x10 + kCmMessages - 1 ? attribute - 0x10
                                                                   : kCmMessages - 1;
}

// A MAD to or from QP 1: a CM MAD (class 7) by its attribute ID, any other
// MAD as the last entry.
inline void cm_message(bool sent, std::span<const uint8_t> mad) {
    constexpr uint8_t kCmClass = 0x07;
    constexpr size_t kAttributeId = 16;
    uint32_t index = kCmMessages - 1;
    if (mad.size() >= kAttributeId + 2 && mad[1] == kCmClass) {
        index = cm_attribute_index(uint32_t{mad[kAttributeId]} << 8 | mad[kAttributeId + 1]);
    }
    if (sent) {
        hit(Area::kCmMessageSent, index);
    } else {
        arrival_hit(Area::kCmMessageReceived, index);
    }
}

// A received CM MAD, as the case of the rdma_cm ID it reached sees it: the
// daemon counted it on arrival.
inline void cm_message_delivered(uint32_t attribute) {
    case_hit(Area::kCmMessageReceived, cm_attribute_index(attribute));
}

inline void cm_state(uint32_t from, uint32_t to) {
    if (from < kCmStates && to < kCmStates) {
        hit(Area::kCmState, from * kCmStates + to);
    }
}

inline void cm_id_state(uint32_t from, uint32_t to) {
    if (from < kCmIdStates && to < kCmIdStates) {
        hit(Area::kCmIdState, from * kCmIdStates + to);
    }
}

constexpr uint32_t refusal_class(int error) {
    for (uint32_t i = 0; i < kRefusalErrnos.size(); ++i) {
        if (kRefusalErrnos[i] == error) {
            return i;
        }
    }
    return kRefusalErrnos.size();
}

inline void refusal(uint32_t op, int error) {
    if (op < kOps) {
        hit(Area::kRefusal, op * kRefusalClasses + refusal_class(error));
    }
}

}  // namespace uroce::coverage

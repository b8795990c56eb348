#include "wire/opcode.h"

#include "wire/headers.h"

namespace uroce::wire {
namespace {

constexpr size_t header_size(ExtHeader h) {
    switch (h) {
        case ExtHeader::kDeth:
            return kDethBytes;
        case ExtHeader::kXrceth:
            return kXrcethBytes;
        case ExtHeader::kReth:
            return kRethBytes;
        case ExtHeader::kFeth:
            return kFethBytes;
        case ExtHeader::kAtomicEth:
            return kAtomicEthBytes;
        case ExtHeader::kAeth:
            return kAethBytes;
        case ExtHeader::kAtomicAckEth:
            return kAtomicAckEthBytes;
        case ExtHeader::kImmDt:
            return kImmDtBytes;
        case ExtHeader::kIeth:
            return kIethBytes;
        case ExtHeader::kCnpReserved:
            return kCnpReservedBytes;
    }
    return 0;
}

template <typename... H>
constexpr OpcodeInfo op(uint8_t opcode, const char* name, Family family, Position position,
                        bool payload, bool in_rxe, H... headers) {
    static_assert(sizeof...(H) <= kMaxExtHeaders);
    OpcodeInfo info{opcode, name, family, position, payload, in_rxe, sizeof...(H), {headers...}, 0};
    size_t bytes = kBthBytes;
    for (size_t i = 0; i < info.header_count; ++i) {
        bytes += header_size(info.headers[i]);
    }
    info.header_bytes = static_cast<uint8_t>(bytes);
    return info;
}

constexpr bool kPayload = true;
constexpr bool kNoPayload = false;
constexpr bool kRxe = true;
constexpr bool kNotRxe = false;

using enum Family;
using enum Position;
using enum ExtHeader;

// IBA vol.1 table 38 plus the IBA 1.5 FLUSH and ATOMIC_WRITE, one line per
// opcode. XRC requests put the XRCETH first; XRC responses are the RC ones.
constexpr OpcodeInfo kDefined[] = {
    op(0x00, "RC_SEND_FIRST", kSend, kFirst, kPayload, kRxe),
    op(0x01, "RC_SEND_MIDDLE", kSend, kMiddle, kPayload, kRxe),
    op(0x02, "RC_SEND_LAST", kSend, kLast, kPayload, kRxe),
    op(0x03, "RC_SEND_LAST_WITH_IMMEDIATE", kSend, kLast, kPayload, kRxe, kImmDt),
    op(0x04, "RC_SEND_ONLY", kSend, kOnly, kPayload, kRxe),
    op(0x05, "RC_SEND_ONLY_WITH_IMMEDIATE", kSend, kOnly, kPayload, kRxe, kImmDt),
    op(0x06, "RC_RDMA_WRITE_FIRST", kWrite, kFirst, kPayload, kRxe, kReth),
    op(0x07, "RC_RDMA_WRITE_MIDDLE", kWrite, kMiddle, kPayload, kRxe),
    op(0x08, "RC_RDMA_WRITE_LAST", kWrite, kLast, kPayload, kRxe),
    op(0x09, "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", kWrite, kLast, kPayload, kRxe, kImmDt),
    op(0x0a, "RC_RDMA_WRITE_ONLY", kWrite, kOnly, kPayload, kRxe, kReth),
    op(0x0b, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", kWrite, kOnly, kPayload, kRxe, kReth, kImmDt),
    op(0x0c, "RC_RDMA_READ_REQUEST", kReadRequest, kOnly, kNoPayload, kRxe, kReth),
    op(0x0d, "RC_RDMA_READ_RESPONSE_FIRST", kReadResponse, kFirst, kPayload, kRxe, kAeth),
    op(0x0e, "RC_RDMA_READ_RESPONSE_MIDDLE", kReadResponse, kMiddle, kPayload, kRxe),
    op(0x0f, "RC_RDMA_READ_RESPONSE_LAST", kReadResponse, kLast, kPayload, kRxe, kAeth),
    op(0x10, "RC_RDMA_READ_RESPONSE_ONLY", kReadResponse, kOnly, kPayload, kRxe, kAeth),
    op(0x11, "RC_ACKNOWLEDGE", kAck, kOnly, kNoPayload, kRxe, kAeth),
    op(0x12, "RC_ATOMIC_ACKNOWLEDGE", kAtomicAck, kOnly, kNoPayload, kRxe, kAeth, kAtomicAckEth),
    op(0x13, "RC_COMPARE_SWAP", kAtomic, kOnly, kNoPayload, kRxe, kAtomicEth),
    op(0x14, "RC_FETCH_ADD", kAtomic, kOnly, kNoPayload, kRxe, kAtomicEth),
    op(0x16, "RC_SEND_LAST_WITH_INVALIDATE", kSend, kLast, kPayload, kRxe, kIeth),
    op(0x17, "RC_SEND_ONLY_WITH_INVALIDATE", kSend, kOnly, kPayload, kRxe, kIeth),
    op(0x1c, "RC_FLUSH", kFlush, kOnly, kNoPayload, kRxe, kFeth, kReth),
    op(0x1d, "RC_ATOMIC_WRITE", kAtomicWrite, kOnly, kPayload, kRxe, kReth),

    op(0x20, "UC_SEND_FIRST", kSend, kFirst, kPayload, kRxe),
    op(0x21, "UC_SEND_MIDDLE", kSend, kMiddle, kPayload, kRxe),
    op(0x22, "UC_SEND_LAST", kSend, kLast, kPayload, kRxe),
    op(0x23, "UC_SEND_LAST_WITH_IMMEDIATE", kSend, kLast, kPayload, kRxe, kImmDt),
    op(0x24, "UC_SEND_ONLY", kSend, kOnly, kPayload, kRxe),
    op(0x25, "UC_SEND_ONLY_WITH_IMMEDIATE", kSend, kOnly, kPayload, kRxe, kImmDt),
    op(0x26, "UC_RDMA_WRITE_FIRST", kWrite, kFirst, kPayload, kRxe, kReth),
    op(0x27, "UC_RDMA_WRITE_MIDDLE", kWrite, kMiddle, kPayload, kRxe),
    op(0x28, "UC_RDMA_WRITE_LAST", kWrite, kLast, kPayload, kRxe),
    op(0x29, "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE", kWrite, kLast, kPayload, kRxe, kImmDt),
    op(0x2a, "UC_RDMA_WRITE_ONLY", kWrite, kOnly, kPayload, kRxe, kReth),
    op(0x2b, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", kWrite, kOnly, kPayload, kRxe, kReth, kImmDt),

    op(0x64, "UD_SEND_ONLY", kSend, kOnly, kPayload, kRxe, kDeth),
    op(0x65, "UD_SEND_ONLY_WITH_IMMEDIATE", kSend, kOnly, kPayload, kRxe, kDeth, kImmDt),

    op(0x81, "CNP", kCnp, kOnly, kNoPayload, kNotRxe, kCnpReserved),

    op(0xa0, "XRC_SEND_FIRST", kSend, kFirst, kPayload, kNotRxe, kXrceth),
    op(0xa1, "XRC_SEND_MIDDLE", kSend, kMiddle, kPayload, kNotRxe, kXrceth),
    op(0xa2, "XRC_SEND_LAST", kSend, kLast, kPayload, kNotRxe, kXrceth),
    op(0xa3, "XRC_SEND_LAST_WITH_IMMEDIATE", kSend, kLast, kPayload, kNotRxe, kXrceth, kImmDt),
    op(0xa4, "XRC_SEND_ONLY", kSend, kOnly, kPayload, kNotRxe, kXrceth),
    op(0xa5, "XRC_SEND_ONLY_WITH_IMMEDIATE", kSend, kOnly, kPayload, kNotRxe, kXrceth, kImmDt),
    op(0xa6, "XRC_RDMA_WRITE_FIRST", kWrite, kFirst, kPayload, kNotRxe, kXrceth, kReth),
    op(0xa7, "XRC_RDMA_WRITE_MIDDLE", kWrite, kMiddle, kPayload, kNotRxe, kXrceth),
    op(0xa8, "XRC_RDMA_WRITE_LAST", kWrite, kLast, kPayload, kNotRxe, kXrceth),
    op(0xa9, "XRC_RDMA_WRITE_LAST_WITH_IMMEDIATE", kWrite, kLast, kPayload, kNotRxe, kXrceth,
       kImmDt),
    op(0xaa, "XRC_RDMA_WRITE_ONLY", kWrite, kOnly, kPayload, kNotRxe, kXrceth, kReth),
    op(0xab, "XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", kWrite, kOnly, kPayload, kNotRxe, kXrceth, kReth,
       kImmDt),
    op(0xac, "XRC_RDMA_READ_REQUEST", kReadRequest, kOnly, kNoPayload, kNotRxe, kXrceth, kReth),
    op(0xad, "XRC_RDMA_READ_RESPONSE_FIRST", kReadResponse, kFirst, kPayload, kNotRxe, kAeth),
    op(0xae, "XRC_RDMA_READ_RESPONSE_MIDDLE", kReadResponse, kMiddle, kPayload, kNotRxe),
    op(0xaf, "XRC_RDMA_READ_RESPONSE_LAST", kReadResponse, kLast, kPayload, kNotRxe, kAeth),
    op(0xb0, "XRC_RDMA_READ_RESPONSE_ONLY", kReadResponse, kOnly, kPayload, kNotRxe, kAeth),
    op(0xb1, "XRC_ACKNOWLEDGE", kAck, kOnly, kNoPayload, kNotRxe, kAeth),
    op(0xb2, "XRC_ATOMIC_ACKNOWLEDGE", kAtomicAck, kOnly, kNoPayload, kNotRxe, kAeth,
       kAtomicAckEth),
    op(0xb3, "XRC_COMPARE_SWAP", kAtomic, kOnly, kNoPayload, kNotRxe, kXrceth, kAtomicEth),
    op(0xb4, "XRC_FETCH_ADD", kAtomic, kOnly, kNoPayload, kNotRxe, kXrceth, kAtomicEth),
    op(0xb6, "XRC_SEND_LAST_WITH_INVALIDATE", kSend, kLast, kPayload, kNotRxe, kXrceth, kIeth),
    op(0xb7, "XRC_SEND_ONLY_WITH_INVALIDATE", kSend, kOnly, kPayload, kNotRxe, kXrceth, kIeth),
};

// Indexed by opcode byte; a null name marks an unknown opcode.
constexpr std::array<OpcodeInfo, 256> make_table() {
    std::array<OpcodeInfo, 256> table{};
    for (const OpcodeInfo& info : kDefined) {
        table[info.opcode] = info;
    }
    return table;
}

constexpr std::array<OpcodeInfo, 256> kTable = make_table();

}  // namespace

Direction OpcodeInfo::direction() const {
    switch (family) {
        case kReadResponse:
        case kAtomicAck:
        case kAck:
            return Direction::kResponse;
        case kCnp:
            return Direction::kNotification;
        default:
            return Direction::kRequest;
    }
}

bool OpcodeInfo::has(ExtHeader h) const {
    for (size_t i = 0; i < header_count; ++i) {
        if (headers[i] == h) {
            return true;
        }
    }
    return false;
}

const OpcodeInfo* opcode_info(uint8_t opcode) {
    const OpcodeInfo& info = kTable[opcode];
    return info.name != nullptr ? &info : nullptr;
}

size_t ext_header_bytes(ExtHeader h) {
    return header_size(h);
}

const char* ext_header_name(ExtHeader h) {
    switch (h) {
        case kDeth:
            return "DETH";
        case kXrceth:
            return "XRCETH";
        case kReth:
            return "RETH";
        case kFeth:
            return "FETH";
        case kAtomicEth:
            return "AtomicETH";
        case kAeth:
            return "AETH";
        case kAtomicAckEth:
            return "AtomicAckETH";
        case kImmDt:
            return "ImmDt";
        case kIeth:
            return "IETH";
        case kCnpReserved:
            return "CNP reserved";
    }
    return "?";
}

}  // namespace uroce::wire

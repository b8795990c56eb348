// The BTH opcode space (IBA vol.1 9.2.1, table 38; Linux rxe_opcode.c): what
// each opcode byte means and which headers follow its BTH. Reliable
// Datagram opcodes are left out (no Linux device implements RD), so they
// look up as unknown like every other undefined byte.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <array>

namespace uroce::wire {

// Opcode bits 7..5: the transport service (IBA 9.2.1; named so beside the
// transport/ that implements the services).
enum class Service : uint8_t {
    kRc = 0x00,
    kUc = 0x20,
    kRd = 0x40,
    kUd = 0x60,
    kCnp = 0x80,
    kXrc = 0xa0,
    kReserved = 0xc0,
    kManufacturer = 0xe0,
};

constexpr Service opcode_service(uint8_t opcode) {
    return static_cast<Service>(opcode & 0xe0);
}

// Headers that may follow the BTH, named as in the spec.
enum class ExtHeader : uint8_t {
    kDeth,
    kXrceth,
    kReth,
    kFeth,
    kAtomicEth,
    kAeth,
    kAtomicAckEth,
    kImmDt,
    kIeth,
    kCnpReserved,
};

enum class Family : uint8_t {
    kSend,
    kWrite,
    kReadRequest,
    kReadResponse,
    kAtomic,
    kAtomicAck,
    kAck,
    kFlush,        // IBA 1.5 memory placement extension
    kAtomicWrite,  // IBA 1.5 memory placement extension
    kCnp,          // RoCEv2 congestion notification (Annex A17.9.3)
};

// The packet's place in its message.
enum class Position : uint8_t { kFirst, kMiddle, kLast, kOnly };

// Requests go to the responder, responses to the requester's completer; a CNP
// goes to the requester's congestion control.
enum class Direction : uint8_t { kRequest, kResponse, kNotification };

inline constexpr size_t kMaxExtHeaders = 3;

struct OpcodeInfo {
    uint8_t opcode;
    const char* name;  // the ib_pack.h IB_OPCODE_* name without its prefix
    Family family;
    Position position;
    bool payload;  // whether data may follow the headers
    // Whether mainline rxe's rxe_opcode[] has the opcode: XRC exists only in
    // unmerged rxe patches, and rxe neither sends nor accepts CNPs.
    bool in_rxe;
    uint8_t header_count;
    std::array<ExtHeader, kMaxExtHeaders> headers;  // in wire order after the BTH
    uint8_t header_bytes;                           // BTH and extension headers

    Service service() const { return opcode_service(opcode); }
    Direction direction() const;
    bool has(ExtHeader h) const;
};

// The low five bits of an opcode: the operation, the same in every transport.
enum class Operation : uint8_t {
    kSendFirst = 0x00,
    kSendMiddle = 0x01,
    kSendLast = 0x02,
    kSendLastImm = 0x03,
    kSendOnly = 0x04,
    kSendOnlyImm = 0x05,
    kWriteFirst = 0x06,
    kWriteMiddle = 0x07,
    kWriteLast = 0x08,
    kWriteLastImm = 0x09,
    kWriteOnly = 0x0a,
    kWriteOnlyImm = 0x0b,
    kReadRequest = 0x0c,
    kReadResponseFirst = 0x0d,
    kReadResponseMiddle = 0x0e,
    kReadResponseLast = 0x0f,
    kReadResponseOnly = 0x10,
    kAck = 0x11,
    kAtomicAck = 0x12,
    kCompareSwap = 0x13,
    kFetchAdd = 0x14,
    kSendLastInv = 0x16,
    kSendOnlyInv = 0x17,
    kAtomicWrite = 0x1d,  // IBA 1.5 memory placement extensions
};

constexpr uint8_t make_opcode(Service service, Operation operation) {
    return static_cast<uint8_t>(static_cast<uint8_t>(service) | static_cast<uint8_t>(operation));
}
constexpr Operation opcode_operation(uint8_t opcode) {
    return static_cast<Operation>(opcode & 0x1f);
}

// The description of opcode, or nullptr when the opcode is unknown. O(1).
const OpcodeInfo* opcode_info(uint8_t opcode);

size_t ext_header_bytes(ExtHeader h);
const char* ext_header_name(ExtHeader h);  // "RETH", "ImmDt", ...

}  // namespace uroce::wire

// The IBA transport headers a RoCEv2 UDP payload carries (IBA vol.1 9.2-9.3,
// Linux rxe_hdr.h): plain structs holding field values in host order, and
// their big-endian encodings. Reserved bits are written as zero and ignored
// when read.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <span>

namespace uroce::wire {

inline constexpr size_t kBthBytes = 12;
inline constexpr size_t kDethBytes = 8;
inline constexpr size_t kXrcethBytes = 4;
inline constexpr size_t kRethBytes = 16;
inline constexpr size_t kFethBytes = 4;
inline constexpr size_t kAtomicEthBytes = 28;
inline constexpr size_t kAethBytes = 4;
inline constexpr size_t kAtomicAckEthBytes = 8;
inline constexpr size_t kImmDtBytes = 4;
inline constexpr size_t kIethBytes = 4;
// A CNP carries 16 reserved bytes after its BTH (IBA Annex A17.9.3).
inline constexpr size_t kCnpReservedBytes = 16;
inline constexpr size_t kIcrcBytes = 4;

inline constexpr uint16_t kDefaultPkey = 0xffff;
// QP numbers are 24 bits; the highest addresses a multicast group.
inline constexpr uint32_t kQpnMask = 0x00ffffff;
inline constexpr uint32_t kMulticastQpn = 0x00ffffff;
// QP1, the General Services Interface, and the Q_Key of its datagrams.
inline constexpr uint32_t kGsiQpn = 1;
inline constexpr uint32_t kGsiQkey = 0x80010000u;

// Base Transport Header.
struct Bth {
    uint8_t opcode = 0;
    bool solicited = false;
    bool migreq = false;
    uint8_t pad = 0;   // 2 bits: bytes added after the payload to reach a 4-byte multiple
    uint8_t tver = 0;  // 4 bits: transport header version, 0 is the only one defined
    uint16_t pkey = kDefaultPkey;
    bool fecn = false;
    bool becn = false;
    uint32_t dest_qp = 0;  // 24 bits
    bool ack_req = false;
    uint32_t psn = 0;  // 24 bits
    friend bool operator==(const Bth&, const Bth&) = default;
};

// A Q_Key with this bit set is a controlled one (IBA 10.2.4.2): only a
// privileged consumer sets it on a QP, and in a work request it stands for
// the QP's own.
inline constexpr uint32_t kControlledQkey = 0x80000000u;

// Datagram ETH (UD).
struct Deth {
    uint32_t qkey = 0;
    uint32_t src_qp = 0;  // 24 bits
    friend bool operator==(const Deth&, const Deth&) = default;
};

// XRC ETH: the XRC SRQ that receives the message.
struct Xrceth {
    uint32_t xrc_srq = 0;  // 24 bits
    friend bool operator==(const Xrceth&, const Xrceth&) = default;
};

// RDMA ETH (write first/only, read request, flush, atomic write).
struct Reth {
    uint64_t va = 0;
    uint32_t rkey = 0;
    uint32_t dma_length = 0;
    friend bool operator==(const Reth&, const Reth&) = default;
};

// Flush ETH (IBA 1.5 memory placement extensions).
struct Feth {
    uint8_t placement_type = 0;  // 4 bits
    uint8_t selectivity = 0;     // 2 bits
    friend bool operator==(const Feth&, const Feth&) = default;
};

// Atomic ETH (compare & swap, fetch & add).
struct AtomicEth {
    uint64_t va = 0;
    uint32_t rkey = 0;
    uint64_t swap_add = 0;  // swap value or addend
    uint64_t compare = 0;
    friend bool operator==(const AtomicEth&, const AtomicEth&) = default;
};

enum class AethType : uint8_t { kAck, kRnrNak, kNak, kReserved };

// NAK codes, the low 5 syndrome bits of a NAK (IBA vol.1 table 44).
enum class NakCode : uint8_t {
    kPsnSequenceError = 0,
    kInvalidRequest = 1,
    kRemoteAccessError = 2,
    kRemoteOperationalError = 3,
    kInvalidRdRequest = 4,
};
// "PSN sequence error", ...; "reserved" for the codes IBA reserves.
const char* nak_code_name(uint8_t code);

// An ACK's credit field when the responder does not report credits.
inline constexpr uint8_t kAethCreditsInvalid = 0x1f;

// ACK ETH: syndrome bits 6..5 give the type, bits 4..0 the credit count,
// RNR timer code or NAK code; bit 7 is reserved.
struct Aeth {
    uint8_t syndrome = 0;
    uint32_t msn = 0;  // 24 bits

    static constexpr Aeth ack(uint32_t msn, uint8_t credits = kAethCreditsInvalid) {
        return {static_cast<uint8_t>(0x00 | (credits & 0x1f)), msn};
    }
    static constexpr Aeth rnr_nak(uint32_t msn, uint8_t timer) {
        return {static_cast<uint8_t>(0x20 | (timer & 0x1f)), msn};
    }
    static constexpr Aeth nak(uint32_t msn, NakCode code) {
        return {static_cast<uint8_t>(0x60 | static_cast<uint8_t>(code)), msn};
    }
    // A set reserved bit 7 makes the syndrome reserved, as rxe reads it.
    constexpr AethType type() const {
        switch (syndrome & 0xe0) {
            case 0x00:
                return AethType::kAck;
            case 0x20:
                return AethType::kRnrNak;
            case 0x60:
                return AethType::kNak;
            default:
                return AethType::kReserved;
        }
    }
    // Credit count, RNR timer code or NAK code, depending on type().
    constexpr uint8_t value() const { return syndrome & 0x1f; }
    friend bool operator==(const Aeth&, const Aeth&) = default;
};

// Atomic Acknowledge ETH: the value the target held before the atomic.
struct AtomicAckEth {
    uint64_t original = 0;
    friend bool operator==(const AtomicAckEth&, const AtomicAckEth&) = default;
};

// Immediate data. Verbs hand it around in network order (__be32); here it is
// the host-order value of those four bytes.
struct ImmDt {
    uint32_t imm = 0;
    friend bool operator==(const ImmDt&, const ImmDt&) = default;
};

// Invalidate ETH: the rkey a SEND_WITH_INVALIDATE invalidates.
struct Ieth {
    uint32_t rkey = 0;
    friend bool operator==(const Ieth&, const Ieth&) = default;
};

void encode(const Bth& h, std::span<uint8_t, kBthBytes> out);
void encode(const Deth& h, std::span<uint8_t, kDethBytes> out);
void encode(const Xrceth& h, std::span<uint8_t, kXrcethBytes> out);
void encode(const Reth& h, std::span<uint8_t, kRethBytes> out);
void encode(const Feth& h, std::span<uint8_t, kFethBytes> out);
void encode(const AtomicEth& h, std::span<uint8_t, kAtomicEthBytes> out);
void encode(const Aeth& h, std::span<uint8_t, kAethBytes> out);
void encode(const AtomicAckEth& h, std::span<uint8_t, kAtomicAckEthBytes> out);
void encode(const ImmDt& h, std::span<uint8_t, kImmDtBytes> out);
void encode(const Ieth& h, std::span<uint8_t, kIethBytes> out);

Bth decode_bth(std::span<const uint8_t, kBthBytes> in);
Deth decode_deth(std::span<const uint8_t, kDethBytes> in);
Xrceth decode_xrceth(std::span<const uint8_t, kXrcethBytes> in);
Reth decode_reth(std::span<const uint8_t, kRethBytes> in);
Feth decode_feth(std::span<const uint8_t, kFethBytes> in);
AtomicEth decode_atomic_eth(std::span<const uint8_t, kAtomicEthBytes> in);
Aeth decode_aeth(std::span<const uint8_t, kAethBytes> in);
AtomicAckEth decode_atomic_ack_eth(std::span<const uint8_t, kAtomicAckEthBytes> in);
ImmDt decode_immdt(std::span<const uint8_t, kImmDtBytes> in);
Ieth decode_ieth(std::span<const uint8_t, kIethBytes> in);

}  // namespace uroce::wire

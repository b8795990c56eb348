#include "wire/headers.h"

#include "wire/byte_order.h"
#include "wire/psn.h"

namespace uroce::wire {

namespace {
constexpr uint32_t k24BitMask = 0x00ffffff;
}  // namespace

void encode(const Bth& h, std::span<uint8_t, kBthBytes> out) {
    uint8_t* p = out.data();
    p[0] = h.opcode;
    p[1] = static_cast<uint8_t>((h.solicited ? 0x80 : 0) | (h.migreq ? 0x40 : 0) |
                                (h.pad & 0x3) << 4 | (h.tver & 0xf));
    store_be16(p + 2, h.pkey);
    p[4] = static_cast<uint8_t>((h.fecn ? 0x80 : 0) | (h.becn ? 0x40 : 0));
    store_be24(p + 5, h.dest_qp & k24BitMask);
    p[8] = h.ack_req ? 0x80 : 0;
    store_be24(p + 9, h.psn & kPsnMask);
}

Bth decode_bth(std::span<const uint8_t, kBthBytes> in) {
    const uint8_t* p = in.data();
    Bth h;
    h.opcode = p[0];
    h.solicited = p[1] & 0x80;
    h.migreq = p[1] & 0x40;
    h.pad = (p[1] >> 4) & 0x3;
    h.tver = p[1] & 0xf;
    h.pkey = load_be16(p + 2);
    h.fecn = p[4] & 0x80;
    h.becn = p[4] & 0x40;
    h.dest_qp = load_be24(p + 5);
    h.ack_req = p[8] & 0x80;
    h.psn = load_be24(p + 9);
    return h;
}

void encode(const Deth& h, std::span<uint8_t, kDethBytes> out) {
    store_be32(out.data(), h.qkey);
    store_be32(out.data() + 4, h.src_qp & k24BitMask);
}

Deth decode_deth(std::span<const uint8_t, kDethBytes> in) {
    return {load_be32(in.data()), load_be24(in.data() + 5)};
}

void encode(const Xrceth& h, std::span<uint8_t, kXrcethBytes> out) {
    store_be32(out.data(), h.xrc_srq & k24BitMask);
}

Xrceth decode_xrceth(std::span<const uint8_t, kXrcethBytes> in) {
    return {load_be24(in.data() + 1)};
}

void encode(const Reth& h, std::span<uint8_t, kRethBytes> out) {
    store_be64(out.data(), h.va);
    store_be32(out.data() + 8, h.rkey);
    store_be32(out.data() + 12, h.dma_length);
}

Reth decode_reth(std::span<const uint8_t, kRethBytes> in) {
    return {load_be64(in.data()), load_be32(in.data() + 8), load_be32(in.data() + 12)};
}

void encode(const Feth& h, std::span<uint8_t, kFethBytes> out) {
    store_be32(out.data(), uint32_t{h.selectivity & 0x3u} << 4 | (h.placement_type & 0xfu));
}

Feth decode_feth(std::span<const uint8_t, kFethBytes> in) {
    const uint8_t low = in[3];
    return {static_cast<uint8_t>(low & 0xf), static_cast<uint8_t>((low >> 4) & 0x3)};
}

void encode(const AtomicEth& h, std::span<uint8_t, kAtomicEthBytes> out) {
    store_be64(out.data(), h.va);
    store_be32(out.data() + 8, h.rkey);
    store_be64(out.data() + 12, h.swap_add);
    store_be64(out.data() + 20, h.compare);
}

AtomicEth decode_atomic_eth(std::span<const uint8_t, kAtomicEthBytes> in) {
    return {load_be64(in.data()), load_be32(in.data() + 8), load_be64(in.data() + 12),
            load_be64(in.data() + 20)};
}

void encode(const Aeth& h, std::span<uint8_t, kAethBytes> out) {
    out[0] = h.syndrome;
    store_be24(out.data() + 1, h.msn & k24BitMask);
}

Aeth decode_aeth(std::span<const uint8_t, kAethBytes> in) {
    return {in[0], load_be24(in.data() + 1)};
}

void encode(const AtomicAckEth& h, std::span<uint8_t, kAtomicAckEthBytes> out) {
    store_be64(out.data(), h.original);
}

AtomicAckEth decode_atomic_ack_eth(std::span<const uint8_t, kAtomicAckEthBytes> in) {
    return {load_be64(in.data())};
}

void encode(const ImmDt& h, std::span<uint8_t, kImmDtBytes> out) {
    store_be32(out.data(), h.imm);
}

ImmDt decode_immdt(std::span<const uint8_t, kImmDtBytes> in) {
    return {load_be32(in.data())};
}

void encode(const Ieth& h, std::span<uint8_t, kIethBytes> out) {
    store_be32(out.data(), h.rkey);
}

Ieth decode_ieth(std::span<const uint8_t, kIethBytes> in) {
    return {load_be32(in.data())};
}

const char* nak_code_name(uint8_t code) {
    switch (static_cast<NakCode>(code)) {
        case NakCode::kPsnSequenceError:
            return "PSN sequence error";
        case NakCode::kInvalidRequest:
            return "invalid request";
        case NakCode::kRemoteAccessError:
            return "remote access error";
        case NakCode::kRemoteOperationalError:
            return "remote operational error";
        case NakCode::kInvalidRdRequest:
            return "invalid RD request";
    }
    return "reserved";
}

}  // namespace uroce::wire

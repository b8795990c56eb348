#include "control/packet_json.h"

#include <stdio.h>

#include <algorithm>
#include <vector>

#include "wire/rnr_timer.h"

namespace uroce {
namespace {

using nlohmann::json;

std::string hex(std::span<const uint8_t> bytes) {
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string out;
    out.reserve(bytes.size() * 2);
    for (uint8_t b : bytes) {
        out += kDigits[b >> 4];
        out += kDigits[b & 15];
    }
    return out;
}

json aeth_json(const wire::Aeth& aeth) {
    json out = {{"syndrome", aeth.syndrome}, {"msn", aeth.msn}};
    switch (aeth.type()) {
        case wire::AethType::kAck:
            out["kind"] = "ACK";
            out["credits"] = aeth.value();
            break;
        case wire::AethType::kRnrNak:
            out["kind"] = "RNR NAK";
            out["rnr_timer"] = aeth.value();
            out["rnr_wait_us"] = wire::rnr_nak_delay(aeth.value()).count();
            break;
        case wire::AethType::kNak:
            out["kind"] = "NAK";
            out["code"] = wire::nak_code_name(aeth.value());
            break;
        case wire::AethType::kReserved:
            out["kind"] = "reserved";
            break;
    }
    return out;
}

json ext_header_json(wire::ExtHeader h, const wire::PacketHeaders& hdr) {
    switch (h) {
        case wire::ExtHeader::kDeth:
            return {{"qkey", hdr.deth.qkey}, {"src_qp", hdr.deth.src_qp}};
        case wire::ExtHeader::kXrceth:
            return {{"xrc_srq", hdr.xrceth.xrc_srq}};
        case wire::ExtHeader::kReth:
            return {{"va", hdr.reth.va}, {"rkey", hdr.reth.rkey}, {"length", hdr.reth.dma_length}};
        case wire::ExtHeader::kFeth:
            return {{"placement_type", hdr.feth.placement_type},
                    {"selectivity", hdr.feth.selectivity}};
        case wire::ExtHeader::kAtomicEth:
            return {{"va", hdr.atomic_eth.va},
                    {"rkey", hdr.atomic_eth.rkey},
                    {"swap_add", hdr.atomic_eth.swap_add},
                    {"compare", hdr.atomic_eth.compare}};
        case wire::ExtHeader::kAeth:
            return aeth_json(hdr.aeth);
        case wire::ExtHeader::kAtomicAckEth:
            return {{"original", hdr.atomic_ack_eth.original}};
        case wire::ExtHeader::kImmDt:
            return {{"imm", hdr.immdt.imm}};
        case wire::ExtHeader::kIeth:
            return {{"rkey", hdr.ieth.rkey}};
        case wire::ExtHeader::kCnpReserved:
            return json::object();
    }
    return json::object();
}

}  // namespace

json packet_json(std::span<const uint8_t> udp_payload) {
    wire::ParsedPacket packet;
    const wire::ParseError error = wire::parse_headers(udp_payload, packet);
    return packet_json(error, packet.info, packet.hdr, static_cast<uint32_t>(packet.payload.size()),
                       udp_payload, udp_payload.size());
}

json packet_json(wire::ParseError error, const wire::OpcodeInfo* info,
                 const wire::PacketHeaders& hdr, uint32_t payload_bytes,
                 std::span<const uint8_t> shown, size_t total) {
    json out = {{"bytes", hex(shown.first(std::min(shown.size(), kMaxPacketHexBytes)))},
                {"bytes_total", total}};
    if (error != wire::ParseError::kOk || !info) {
        out["error"] = wire::parse_error_text(error);
        return out;
    }
    const wire::Bth& bth = hdr.bth;
    out["opcode"] = info->name;
    out["psn"] = bth.psn;
    out["dest_qp"] = bth.dest_qp;
    out["payload_bytes"] = payload_bytes;
    json headers = {{"BTH",
                     {{"opcode", bth.opcode},
                      {"solicited", bth.solicited},
                      {"migreq", bth.migreq},
                      {"pad", bth.pad},
                      {"tver", bth.tver},
                      {"pkey", bth.pkey},
                      {"fecn", bth.fecn},
                      {"becn", bth.becn},
                      {"dest_qp", bth.dest_qp},
                      {"ack_req", bth.ack_req},
                      {"psn", bth.psn}}}};
    for (uint8_t i = 0; i < info->header_count; ++i) {
        const wire::ExtHeader h = info->headers[i];
        headers[wire::ext_header_name(h)] = ext_header_json(h, hdr);
    }
    out["headers"] = std::move(headers);
    return out;
}

json captured_packet_json(std::span<const uint8_t> shown, size_t total) {
    // The payload's bytes do not count to the decoding, only their number.
    std::vector<uint8_t> whole(std::max(total, shown.size()));
    std::copy(shown.begin(), shown.end(), whole.begin());
    wire::ParsedPacket packet;
    const wire::ParseError error = wire::parse_headers(whole, packet);
    return packet_json(error, packet.info, packet.hdr, static_cast<uint32_t>(packet.payload.size()),
                       shown, whole.size());
}

std::string packet_summary(const json& packet) {
    if (packet.contains("error")) {
        return "malformed packet (" + packet["error"].get<std::string>() + "), " +
               std::to_string(packet["bytes_total"].get<size_t>()) + " bytes";
    }
    std::string text = packet["opcode"].get<std::string>() + " psn " +
                       std::to_string(packet["psn"].get<uint32_t>()) + " to qp " +
                       std::to_string(packet["dest_qp"].get<uint32_t>());
    const json& headers = packet["headers"];
    if (headers.contains("AETH")) {
        const json& aeth = headers["AETH"];
        text += ", " + aeth["kind"].get<std::string>();
        if (aeth.contains("code")) {
            text += " (" + aeth["code"].get<std::string>() + ")";
        } else if (aeth.contains("rnr_wait_us")) {
            text += " (wait " + std::to_string(aeth["rnr_wait_us"].get<int64_t>()) + " us)";
        }
        text += " msn " + std::to_string(aeth["msn"].get<uint32_t>());
    }
    if (const size_t payload = packet["payload_bytes"].get<size_t>(); payload > 0) {
        text += ", " + std::to_string(payload) + " B payload";
    }
    if (headers["BTH"]["ack_req"].get<bool>()) {
        text += ", ack requested";
    }
    return text;
}

}  // namespace uroce

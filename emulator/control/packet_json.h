// A RoCEv2 packet decoded for people: every header the opcode carries with
// its fields by name (BTH, DETH, XRCETH, RETH, FETH, AtomicETH, AETH,
// AtomicAckETH, ImmDt, IETH), the payload length and the bytes. Used by step
// mode's listing and the console's ladder.
#pragma once

#include <stdint.h>

#include <nlohmann/json.hpp>
#include <span>
#include <string>

#include "wire/packet.h"

namespace uroce {

// The decoded packet; {"error": why} when its layout does not parse. At most
// kMaxPacketHexBytes of it are given as hex ("bytes"; "bytes_total" says
// how many it has).
inline constexpr size_t kMaxPacketHexBytes = 512;
nlohmann::json packet_json(std::span<const uint8_t> udp_payload);
// The same from a packet decoded already, whose first bytes are `shown`
// (of `total`); `packet` only counts when `error` is kOk.
nlohmann::json packet_json(wire::ParseError error, const wire::OpcodeInfo* info,
                           const wire::PacketHeaders& headers, uint32_t payload_bytes,
                           std::span<const uint8_t> shown, size_t total);

// A captured packet (a pcap file's): its first bytes, which hold its
// headers, and its whole length.
nlohmann::json captured_packet_json(std::span<const uint8_t> shown, size_t total);

// One line: "RC_SEND_ONLY psn 4096 to qp 18, 64 B payload, ack requested",
// "RC_ACKNOWLEDGE psn 4096 to qp 17, NAK (PSN sequence error) msn 3".
std::string packet_summary(const nlohmann::json& packet);

}  // namespace uroce

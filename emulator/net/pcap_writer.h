// Writes a device's packets as a pcap file that Wireshark and tshark decode
// as RoCEv2: each UDP payload is framed with a synthesised Ethernet, IPv4
// and UDP header (MACs from the addresses, IP ID 0 with DF, as sent). The
// frames of RAW_PACKET QPs are recorded as they are.
#pragma once

#include <stdint.h>

#include <chrono>
#include <span>

#include "util/unique_fd.h"

namespace uroce {

class PcapWriter {
  public:
    // Takes the file (already open for writing) and writes the pcap header.
    // Returns false when it cannot be written.
    bool open(UniqueFd file);
    bool is_open() const { return static_cast<bool>(file_); }
    void close() { file_.reset(); }
    // Addresses in network order, ports in host order.
    void record(std::span<const uint8_t> udp_payload, uint32_t src_ipv4, uint32_t dst_ipv4,
                uint16_t src_port, uint16_t dst_port);
    // A whole Ethernet frame of a RAW_PACKET QP, as it is.
    void record_frame(std::span<const uint8_t> frame);
    uint64_t packets() const { return packets_; }

  private:
    void write_record(std::span<const uint8_t> headers, std::span<const uint8_t> rest);

    UniqueFd file_;
    uint64_t packets_ = 0;
};

}  // namespace uroce

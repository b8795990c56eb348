// Writes a device's packets as a pcap file that Wireshark and tshark decode
// as RoCEv2: each UDP payload is framed with a synthesised Ethernet, IPv4 or
// IPv6, and UDP header (MACs from the addresses; IPv4 with IP ID 0 and DF,
// as sent). The
// frames of RAW_PACKET QPs are recorded as they are.
#pragma once

#include <stdint.h>

#include <atomic>
#include <chrono>
#include <span>

#include "util/unique_fd.h"
#include "wire/ip_address.h"

namespace uroce {

class PcapWriter {
  public:
    // Takes the file (already open for writing) and writes the pcap header.
    // Returns false when it cannot be written.
    bool open(UniqueFd file);
    // Any engine may ask (whether a packet it sends to the device needs
    // its ICRC); the file is the device's engine's.
    bool is_open() const { return open_.load(std::memory_order_relaxed); }
    void close() {
        file_.reset();
        open_.store(false, std::memory_order_relaxed);
    }
    // Both addresses of one family; ports in host order.
    void record(std::span<const uint8_t> udp_payload, const wire::IpAddress& src_ip,
                const wire::IpAddress& dest_ip, uint16_t src_port, uint16_t dst_port);
    // A whole Ethernet frame of a RAW_PACKET QP, as it is.
    void record_frame(std::span<const uint8_t> frame);
    uint64_t packets() const { return packets_; }

  private:
    void write_record(std::span<const uint8_t> headers, std::span<const uint8_t> rest);

    UniqueFd file_;
    std::atomic<bool> open_{false};
    uint64_t packets_ = 0;
};

}  // namespace uroce

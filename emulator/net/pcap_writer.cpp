#include "net/pcap_writer.h"

#include <arpa/inet.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "wire/grh.h"

namespace uroce {
namespace {

constexpr uint32_t kPcapMagic = 0xa1b2c3d4;  // microsecond timestamps
constexpr uint32_t kLinkTypeEthernet = 1;
constexpr uint32_t kSnapLength = 65535;
constexpr size_t kEthernetBytes = 14;
constexpr size_t kMaxFrameHeaders = kEthernetBytes + wire::kGrhBytes + wire::kUdpHeaderBytes;

struct PcapFileHeader {
    uint32_t magic;
    uint16_t version_major;
    uint16_t version_minor;
    int32_t thiszone;
    uint32_t sigfigs;
    uint32_t snaplen;
    uint32_t network;
};

struct PcapRecordHeader {
    uint32_t seconds;
    uint32_t microseconds;
    uint32_t captured;
    uint32_t length;
};

// The locally administered MAC 02:00:a:b:c:d stands for an address whose
// last four bytes are a.b.c.d.
void mac_of(const wire::IpAddress& address, uint8_t* mac) {
    mac[0] = 0x02;
    mac[1] = 0x00;
    memcpy(mac + 2, address.bytes().data() + 12, 4);
}

}  // namespace

bool PcapWriter::open(UniqueFd file) {
    const PcapFileHeader header{kPcapMagic, 2, 4, 0, 0, kSnapLength, kLinkTypeEthernet};
    if (write(file.get(), &header, sizeof(header)) != sizeof(header)) {
        return false;
    }
    file_ = std::move(file);
    open_.store(true, std::memory_order_relaxed);
    packets_ = 0;
    return true;
}

void PcapWriter::record(std::span<const uint8_t> udp_payload, const wire::IpAddress& src_ip,
                        const wire::IpAddress& dest_ip, uint16_t src_port, uint16_t dst_port) {
    if (!file_) {
        return;
    }
    // The IP header as the packet is sent: the GRH a receiver would see
    // holds it (for IPv4, in its last 20 bytes).
    const auto grh = wire::received_grh(src_ip, dest_ip, udp_payload.size(), 64);
    const size_t ip_bytes = src_ip.is_v4() ? wire::kIpv4HeaderBytes : wire::kGrhBytes;
    uint8_t frame[kMaxFrameHeaders] = {};
    mac_of(dest_ip, frame);
    mac_of(src_ip, frame + 6);
    frame[12] = src_ip.is_v4() ? 0x08 : 0x86;  // IPv4 0x0800, IPv6 0x86dd
    frame[13] = src_ip.is_v4() ? 0x00 : 0xdd;
    memcpy(frame + kEthernetBytes, grh.data() + wire::kGrhBytes - ip_bytes, ip_bytes);
    uint8_t* udp = frame + kEthernetBytes + ip_bytes;
    const uint16_t udp_length = static_cast<uint16_t>(8 + udp_payload.size());
    udp[0] = static_cast<uint8_t>(src_port >> 8);
    udp[1] = static_cast<uint8_t>(src_port);
    udp[2] = static_cast<uint8_t>(dst_port >> 8);
    udp[3] = static_cast<uint8_t>(dst_port);
    udp[4] = static_cast<uint8_t>(udp_length >> 8);
    udp[5] = static_cast<uint8_t>(udp_length);  // checksum 0: none, as RoCEv2 allows
    write_record({frame, kEthernetBytes + ip_bytes + wire::kUdpHeaderBytes}, udp_payload);
}

void PcapWriter::record_frame(std::span<const uint8_t> frame) {
    if (file_) {
        write_record({}, frame);
    }
}

void PcapWriter::write_record(std::span<const uint8_t> headers, std::span<const uint8_t> rest) {
    timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    const auto length = static_cast<uint32_t>(headers.size() + rest.size());
    PcapRecordHeader record{static_cast<uint32_t>(now.tv_sec),
                            static_cast<uint32_t>(now.tv_nsec / 1000), length, length};
    iovec parts[] = {{&record, sizeof(record)},
                     {const_cast<uint8_t*>(headers.data()), headers.size()},
                     {const_cast<uint8_t*>(rest.data()), rest.size()}};
    if (writev(file_.get(), parts, 3) != static_cast<ssize_t>(sizeof(record) + length)) {
        close();  // the reader went away or the disk is full: stop tracing
        return;
    }
    ++packets_;
}

}  // namespace uroce

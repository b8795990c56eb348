#include "net/pcap_writer.h"

#include <arpa/inet.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

namespace uroce {
namespace {

constexpr uint32_t kPcapMagic = 0xa1b2c3d4;  // microsecond timestamps
constexpr uint32_t kLinkTypeEthernet = 1;
constexpr uint32_t kSnapLength = 65535;
constexpr size_t kFrameHeaders = 14 + 20 + 8;

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

uint16_t ipv4_checksum(const uint8_t* header) {
    uint32_t sum = 0;
    for (int i = 0; i < 20; i += 2) {
        sum += uint32_t{header[i]} << 8 | header[i + 1];
    }
    while (sum >> 16) {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    return static_cast<uint16_t>(~sum);
}

// The locally administered MAC 02:00:a:b:c:d stands for address a.b.c.d.
void mac_of(uint32_t ipv4, uint8_t* mac) {
    mac[0] = 0x02;
    mac[1] = 0x00;
    memcpy(mac + 2, &ipv4, 4);
}

}  // namespace

bool PcapWriter::open(UniqueFd file) {
    const PcapFileHeader header{kPcapMagic, 2, 4, 0, 0, kSnapLength, kLinkTypeEthernet};
    if (write(file.get(), &header, sizeof(header)) != sizeof(header)) {
        return false;
    }
    file_ = std::move(file);
    packets_ = 0;
    return true;
}

void PcapWriter::record(std::span<const uint8_t> udp_payload, uint32_t src_ipv4, uint32_t dst_ipv4,
                        uint16_t src_port, uint16_t dst_port) {
    if (!file_) {
        return;
    }
    uint8_t frame[kFrameHeaders] = {};
    mac_of(dst_ipv4, frame);
    mac_of(src_ipv4, frame + 6);
    frame[12] = 0x08;  // IPv4
    uint8_t* ip = frame + 14;
    const uint16_t ip_length = static_cast<uint16_t>(20 + 8 + udp_payload.size());
    ip[0] = 0x45;
    ip[2] = static_cast<uint8_t>(ip_length >> 8);
    ip[3] = static_cast<uint8_t>(ip_length);
    ip[6] = 0x40;  // don't fragment
    ip[8] = 64;    // TTL
    ip[9] = 17;    // UDP
    memcpy(ip + 12, &src_ipv4, 4);
    memcpy(ip + 16, &dst_ipv4, 4);
    const uint16_t checksum = ipv4_checksum(ip);
    ip[10] = static_cast<uint8_t>(checksum >> 8);
    ip[11] = static_cast<uint8_t>(checksum);
    uint8_t* udp = ip + 20;
    const uint16_t udp_length = static_cast<uint16_t>(8 + udp_payload.size());
    udp[0] = static_cast<uint8_t>(src_port >> 8);
    udp[1] = static_cast<uint8_t>(src_port);
    udp[2] = static_cast<uint8_t>(dst_port >> 8);
    udp[3] = static_cast<uint8_t>(dst_port);
    udp[4] = static_cast<uint8_t>(udp_length >> 8);
    udp[5] = static_cast<uint8_t>(udp_length);  // checksum 0: none, as RoCEv2 allows
    write_record(frame, udp_payload);
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
        file_.reset();  // the reader went away or the disk is full: stop tracing
        return;
    }
    ++packets_;
}

}  // namespace uroce

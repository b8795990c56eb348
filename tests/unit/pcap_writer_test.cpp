#include "net/pcap_writer.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <time.h>

#include <vector>

namespace uroce {
namespace {

using Bytes = std::vector<uint8_t>;

constexpr size_t kGlobalHeader = 24;
constexpr size_t kRecordHeader = 16;
constexpr size_t kFrameHeaders = 14 + 20 + 8;  // Ethernet, IPv4, UDP

uint32_t u32(const Bytes& b, size_t at) {  // the file's (host) byte order
    uint32_t v;
    memcpy(&v, b.data() + at, 4);
    return v;
}
uint16_t u16(const Bytes& b, size_t at) {
    uint16_t v;
    memcpy(&v, b.data() + at, 2);
    return v;
}
uint16_t be16(const Bytes& b, size_t at) {
    return uint16_t(b[at] << 8 | b[at + 1]);
}

wire::IpAddress address(const char* text) {
    const auto ip = wire::IpAddress::parse(text);
    EXPECT_TRUE(ip.has_value()) << text;
    return ip.value_or(wire::IpAddress());
}

// What the writer wrote, read through a second descriptor of the same file.
class PcapWriterTest : public ::testing::Test {
  protected:
    void SetUp() override {
        file_ = memfd_create("pcap", MFD_CLOEXEC);
        ASSERT_GE(file_, 0);
        ASSERT_TRUE(writer_.open(UniqueFd(dup(file_))));
    }
    void TearDown() override { close(file_); }

    Bytes contents() const {
        Bytes bytes(lseek(file_, 0, SEEK_END));
        EXPECT_EQ(pread(file_, bytes.data(), bytes.size(), 0), ssize_t(bytes.size()));
        return bytes;
    }

    int file_ = -1;
    PcapWriter writer_;
};

TEST_F(PcapWriterTest, GlobalHeaderIsLibpcapEthernet) {
    const Bytes file = contents();
    ASSERT_EQ(file.size(), kGlobalHeader);
    EXPECT_EQ(u32(file, 0), 0xa1b2c3d4u);  // microsecond timestamps
    EXPECT_EQ(u16(file, 4), 2);
    EXPECT_EQ(u16(file, 6), 4);
    EXPECT_EQ(u32(file, 8), 0u);   // thiszone
    EXPECT_EQ(u32(file, 12), 0u);  // sigfigs
    EXPECT_EQ(u32(file, 16), 65535u);
    EXPECT_EQ(u32(file, 20), 1u);  // LINKTYPE_ETHERNET
    EXPECT_TRUE(writer_.is_open());
    EXPECT_EQ(writer_.packets(), 0u);
}

TEST_F(PcapWriterTest, RecordsFramePacketsAsEthernetIpv4Udp) {
    Bytes first(100), second(13);
    for (size_t i = 0; i < first.size(); ++i) {
        first[i] = uint8_t(i);
    }
    second.assign(second.size(), 0xab);
    // The writer stamps records with CLOCK_REALTIME; time() may run a tick
    // behind it, so the bounds come from the same clock.
    const auto now_seconds = [] {
        timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        return static_cast<uint32_t>(t.tv_sec);
    };
    const uint32_t before = now_seconds();
    writer_.record(first, address("127.0.0.1"), address("127.0.0.2"), 49152, 4791);
    writer_.record(second, address("10.1.2.3"), address("192.168.200.4"), 4791, 4791);
    EXPECT_EQ(writer_.packets(), 2u);

    const Bytes file = contents();
    size_t at = kGlobalHeader;
    struct Expected {
        const Bytes& payload;
        uint8_t src[4], dst[4];
        uint16_t src_port, dst_port;
    };
    for (const Expected& e : {Expected{first, {127, 0, 0, 1}, {127, 0, 0, 2}, 49152, 4791},
                              Expected{second, {10, 1, 2, 3}, {192, 168, 200, 4}, 4791, 4791}}) {
        ASSERT_LE(at + kRecordHeader, file.size());
        const uint32_t seconds = u32(file, at);
        EXPECT_GE(seconds, before);
        EXPECT_LE(seconds, now_seconds());
        EXPECT_LT(u32(file, at + 4), 1000000u);
        const uint32_t length = u32(file, at + 8);
        EXPECT_EQ(length, kFrameHeaders + e.payload.size());
        EXPECT_EQ(u32(file, at + 12), length);  // nothing cut off
        at += kRecordHeader;
        ASSERT_LE(at + length, file.size());
        const Bytes frame(file.begin() + at, file.begin() + at + length);
        at += length;

        // Ethernet: the locally administered MACs 02:00:a:b:c:d, then IPv4.
        EXPECT_EQ(Bytes(frame.begin(), frame.begin() + 6),
                  (Bytes{0x02, 0x00, e.dst[0], e.dst[1], e.dst[2], e.dst[3]}));
        EXPECT_EQ(Bytes(frame.begin() + 6, frame.begin() + 12),
                  (Bytes{0x02, 0x00, e.src[0], e.src[1], e.src[2], e.src[3]}));
        EXPECT_EQ(be16(frame, 12), 0x0800);

        const size_t ip = 14;
        EXPECT_EQ(frame[ip], 0x45);
        EXPECT_EQ(be16(frame, ip + 2), 20 + 8 + e.payload.size());
        EXPECT_EQ(be16(frame, ip + 6), 0x4000);  // DF, no fragment offset
        EXPECT_EQ(frame[ip + 9], 17);            // UDP
        EXPECT_EQ(Bytes(frame.begin() + ip + 12, frame.begin() + ip + 16), Bytes(e.src, e.src + 4));
        EXPECT_EQ(Bytes(frame.begin() + ip + 16, frame.begin() + ip + 20), Bytes(e.dst, e.dst + 4));
        // RFC 1071: the one's complement sum over a correct header, its
        // checksum included, is all ones.
        uint32_t sum = 0;
        for (size_t i = 0; i < 20; i += 2) {
            sum += be16(frame, ip + i);
        }
        while (sum >> 16) {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        EXPECT_EQ(sum, 0xffffu);

        const size_t udp = ip + 20;
        EXPECT_EQ(be16(frame, udp), e.src_port);
        EXPECT_EQ(be16(frame, udp + 2), e.dst_port);
        EXPECT_EQ(be16(frame, udp + 4), 8 + e.payload.size());
        EXPECT_EQ(be16(frame, udp + 6), 0);  // no UDP checksum, as RoCEv2 allows
        EXPECT_EQ(Bytes(frame.begin() + udp + 8, frame.end()), e.payload);
    }
    EXPECT_EQ(at, file.size());
}

// An IPv6 packet is framed with an IPv6 header (ethertype 0x86dd): payload
// length, next header UDP, hop limit, both addresses.
TEST_F(PcapWriterTest, RecordsIpv6PacketsAsEthernetIpv6Udp) {
    const Bytes payload(40, 0x5a);
    writer_.record(payload, address("fd00::1"), address("fd00::2"), 49152, 4791);
    const Bytes file = contents();
    constexpr size_t kIpv6Frame = 14 + 40 + 8;
    ASSERT_EQ(file.size(), kGlobalHeader + kRecordHeader + kIpv6Frame + payload.size());
    const Bytes frame(file.begin() + kGlobalHeader + kRecordHeader, file.end());
    EXPECT_EQ(be16(frame, 12), 0x86dd);
    const size_t ip = 14;
    EXPECT_EQ(frame[ip] >> 4, 6);
    EXPECT_EQ(be16(frame, ip + 4), 8 + payload.size());
    EXPECT_EQ(frame[ip + 6], 17);  // UDP
    EXPECT_EQ(frame[ip + 7], 64);
    const wire::IpAddress src = address("fd00::1");
    const wire::IpAddress dst = address("fd00::2");
    EXPECT_EQ(Bytes(frame.begin() + ip + 8, frame.begin() + ip + 24),
              Bytes(src.bytes().begin(), src.bytes().end()));
    EXPECT_EQ(Bytes(frame.begin() + ip + 24, frame.begin() + ip + 40),
              Bytes(dst.bytes().begin(), dst.bytes().end()));
    const size_t udp = ip + 40;
    EXPECT_EQ(be16(frame, udp), 49152);
    EXPECT_EQ(be16(frame, udp + 2), 4791);
    EXPECT_EQ(be16(frame, udp + 4), 8 + payload.size());
    EXPECT_EQ(Bytes(frame.begin() + udp + 8, frame.end()), payload);
}

TEST_F(PcapWriterTest, Ipv4ChecksumMatchesAKnownHeader) {
    // 45 00 0080 0000 4000 40 11 cksum 7f000001 7f000002; the checksum was
    // computed independently of the writer.
    writer_.record(Bytes(100), address("127.0.0.1"), address("127.0.0.2"), 4791, 4791);
    const Bytes file = contents();
    EXPECT_EQ(be16(file, kGlobalHeader + kRecordHeader + 14 + 10), 0x3c6a);
}

TEST_F(PcapWriterTest, NothingIsRecordedAfterClose) {
    writer_.record(Bytes(10), address("127.0.0.1"), address("127.0.0.2"), 4791, 4791);
    writer_.close();
    EXPECT_FALSE(writer_.is_open());
    writer_.record(Bytes(10), address("127.0.0.1"), address("127.0.0.2"), 4791, 4791);
    EXPECT_EQ(writer_.packets(), 1u);
    EXPECT_EQ(contents().size(), kGlobalHeader + kRecordHeader + kFrameHeaders + 10);
}

TEST(PcapWriter, OpenFailsOnAFileThatCannotBeWritten) {
    PcapWriter writer;
    EXPECT_FALSE(writer.open(UniqueFd(open("/dev/null", O_RDONLY | O_CLOEXEC))));
    EXPECT_FALSE(writer.is_open());
}

TEST(PcapWriter, StopsRecordingWhenAWriteFails) {
    int pipe_fds[2];
    ASSERT_EQ(pipe2(pipe_fds, O_CLOEXEC), 0);
    PcapWriter writer;
    ASSERT_TRUE(writer.open(UniqueFd(pipe_fds[1])));
    close(pipe_fds[0]);  // the reader is gone: the next write fails with EPIPE
    signal(SIGPIPE, SIG_IGN);
    writer.record(Bytes(10), address("127.0.0.1"), address("127.0.0.2"), 4791, 4791);
    EXPECT_FALSE(writer.is_open());
    EXPECT_EQ(writer.packets(), 0u);
}

}  // namespace
}  // namespace uroce

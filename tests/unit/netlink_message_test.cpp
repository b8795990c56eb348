// Netlink encoding and parsing (emulator/netlink/message.cpp), byte by byte
// as include/net/netlink.h lays messages out.
#include "netlink/message.h"

#include <gtest/gtest.h>
#include <string.h>

#include <vector>

namespace {

using uroce::netlink::Bytes;
using uroce::netlink::MessageWriter;
using uroce::netlink::Request;

Bytes bytes(std::initializer_list<int> values) {
    Bytes out;
    for (int v : values) {
        out.push_back(std::byte(v));
    }
    return out;
}

std::vector<Request> parse(const Bytes& datagram) {
    std::vector<Request> out;
    EXPECT_TRUE(uroce::netlink::parse_messages(datagram, out));
    return out;
}

TEST(netlinkMessage, AttributesAreAlignedToFourBytes) {
    MessageWriter m(0x1401, NLM_F_MULTI, 0x01020304, 77);
    m.put_u8(14, 1);
    m.put_string(2, "ab");
    m.put_u64(6, 0x1122334455667788);
    const Bytes got = m.finish();
    const Bytes expected = bytes({
        44, 0, 0,  0, 0x01, 0x14, 0x02, 0x00, 4,    3,    2,    1,    77, 0, 0, 0,  // header
        5,  0, 14, 0, 1,    0,    0,    0,                             // u8, 3 bytes of padding
        7,  0, 2,  0, 'a',  'b',  0,    0,                             // "ab\0", 1 byte of padding
        12, 0, 6,  0, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,  // u64
    });
    EXPECT_EQ(got, expected);
}

TEST(netlinkMessage, NestsCoverTheirContentsAndMayCarryTheNestedFlag) {
    MessageWriter m(1, 0, 0, 0);
    const size_t outer = m.begin_nest(80, true);
    const size_t inner = m.begin_nest(81);
    m.put_u32(83, 5);
    m.end_nest(inner);
    m.end_nest(outer);
    const Bytes got = m.finish();
    ASSERT_EQ(got.size(), 16u + 4 + 4 + 8);
    EXPECT_EQ(Bytes(got.begin() + 16, got.end()),
              bytes({16, 0, 80, 0x80, 12, 0, 81, 0, 8, 0, 83, 0, 5, 0, 0, 0}));
}

TEST(netlinkMessage, ParsesEveryMessageOfADatagram) {
    MessageWriter first(0x1401, NLM_F_REQUEST | NLM_F_ACK, 9, 0);
    first.put_u32(1, 3);
    first.put_string(69, "uverbs");
    MessageWriter second(0x1406, NLM_F_REQUEST, 10, 0);
    Bytes datagram = first.finish();
    const Bytes tail = second.finish();
    datagram.insert(datagram.end(), tail.begin(), tail.end());

    const std::vector<Request> requests = parse(datagram);
    ASSERT_EQ(requests.size(), 2u);
    EXPECT_EQ(requests[0].header.nlmsg_seq, 9u);
    EXPECT_EQ(requests[0].bytes.size(), 16u + 8 + 12);
    uint32_t index = 0;
    EXPECT_TRUE(requests[0].u32(1, index));
    EXPECT_EQ(index, 3u);
    EXPECT_FALSE(requests[0].u32(69, index));  // a string is not a u32
    std::string type;
    EXPECT_TRUE(requests[0].string(69, type, 31));
    EXPECT_EQ(type, "uverbs");
    EXPECT_FALSE(requests[0].string(69, type, 5));  // longer than allowed
    EXPECT_FALSE(requests[0].has(2));
    EXPECT_EQ(requests[1].header.nlmsg_type, 0x1406);
    EXPECT_TRUE(requests[1].attrs.empty());
}

TEST(netlinkMessage, AStringMustEndWithinItsAttribute) {
    Bytes datagram = bytes({20,    0, 0, 0, 1,   0x14, 1,   0,  0, 0, 0, 0, 0, 0, 0, 0,  //
                            4 + 4, 0, 2, 0, 'a', 'b',  'c', 'd'});
    datagram[0] = std::byte(24);
    const std::vector<Request> requests = parse(datagram);
    ASSERT_EQ(requests.size(), 1u);
    std::string name;
    EXPECT_FALSE(requests[0].string(2, name, 63));
}

TEST(netlinkMessage, MalformedLengthsAreRefused) {
    const Bytes cases[] = {
        bytes({16, 0, 0}),                                             // short header
        bytes({8, 0, 0, 0, 1, 0x14, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0}),    // length < header
        bytes({100, 0, 0, 0, 1, 0x14, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0}),  // length > datagram
        bytes({20, 0, 0, 0, 1, 0x14, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 1, 0}),  // attr < 4
        bytes({20, 0, 0, 0, 1, 0x14, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 0, 1, 0}),  // attr past end
    };
    for (const Bytes& datagram : cases) {
        std::vector<Request> out;
        const uroce::Result r = uroce::netlink::parse_messages(datagram, out);
        EXPECT_FALSE(r);
        EXPECT_EQ(r.error, EINVAL);
    }
}

// netlink_ack: an ACK carries the request's header only and NLM_F_CAPPED;
// an error echoes the whole request.
TEST(netlinkMessage, AcksAndErrorsAsTheKernelSendsThem) {
    MessageWriter m(0x1401, NLM_F_REQUEST | NLM_F_ACK, 42, 0);
    m.put_u32(1, 7);
    const Bytes datagram = m.finish();  // the requests' bytes point into it
    const std::vector<Request> requests = parse(datagram);
    ASSERT_EQ(requests.size(), 1u);

    const Bytes ack = uroce::netlink::error_message(requests[0], 0, 5);
    ASSERT_EQ(ack.size(), 36u);
    nlmsghdr h;
    memcpy(&h, ack.data(), sizeof(h));
    EXPECT_EQ(h.nlmsg_len, 36u);
    EXPECT_EQ(h.nlmsg_type, NLMSG_ERROR);
    EXPECT_EQ(h.nlmsg_flags, NLM_F_CAPPED);
    EXPECT_EQ(h.nlmsg_seq, 42u);
    EXPECT_EQ(h.nlmsg_pid, 5u);
    int32_t error;
    memcpy(&error, ack.data() + 16, sizeof(error));
    EXPECT_EQ(error, 0);
    EXPECT_TRUE(std::equal(ack.begin() + 20, ack.end(), requests[0].bytes.begin()));

    const Bytes refusal = uroce::netlink::error_message(requests[0], EINVAL, 5);
    ASSERT_EQ(refusal.size(), 20u + 24);
    memcpy(&h, refusal.data(), sizeof(h));
    EXPECT_EQ(h.nlmsg_flags, 0);
    memcpy(&error, refusal.data() + 16, sizeof(error));
    EXPECT_EQ(error, -EINVAL);
    EXPECT_TRUE(std::equal(refusal.begin() + 20, refusal.end(), requests[0].bytes.begin()));

    const Bytes done = uroce::netlink::done_message(requests[0], 5);
    ASSERT_EQ(done.size(), 20u);
    memcpy(&h, done.data(), sizeof(h));
    EXPECT_EQ(h.nlmsg_type, NLMSG_DONE);
    EXPECT_EQ(h.nlmsg_flags, NLM_F_MULTI);
    EXPECT_EQ(h.nlmsg_seq, 42u);
}

}  // namespace

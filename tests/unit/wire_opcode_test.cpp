#include "wire/opcode.h"

#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <string>
#include <vector>

// Suite names start with "wire" so that `ctest -R wire` selects these tests.
namespace uroce::wire {
namespace {

// IBA vol.1 table 38 (and rxe_opcode.c for FLUSH / ATOMIC_WRITE, the XRC
// patches for XRC), copied by hand: opcode, name, direction, operation,
// place in the message, whether data follows the headers, whether mainline
// rxe knows the opcode, then the headers in wire order.
constexpr const char* kSpecTable = R"(
0x00 RC_SEND_FIRST                      req  send         first  data   rxe  BTH
0x01 RC_SEND_MIDDLE                     req  send         middle data   rxe  BTH
0x02 RC_SEND_LAST                       req  send         last   data   rxe  BTH
0x03 RC_SEND_LAST_WITH_IMMEDIATE        req  send         last   data   rxe  BTH ImmDt
0x04 RC_SEND_ONLY                       req  send         only   data   rxe  BTH
0x05 RC_SEND_ONLY_WITH_IMMEDIATE        req  send         only   data   rxe  BTH ImmDt
0x06 RC_RDMA_WRITE_FIRST                req  write        first  data   rxe  BTH RETH
0x07 RC_RDMA_WRITE_MIDDLE               req  write        middle data   rxe  BTH
0x08 RC_RDMA_WRITE_LAST                 req  write        last   data   rxe  BTH
0x09 RC_RDMA_WRITE_LAST_WITH_IMMEDIATE  req  write        last   data   rxe  BTH ImmDt
0x0a RC_RDMA_WRITE_ONLY                 req  write        only   data   rxe  BTH RETH
0x0b RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE  req  write        only   data   rxe  BTH RETH ImmDt
0x0c RC_RDMA_READ_REQUEST               req  read-req     only   nodata rxe  BTH RETH
0x0d RC_RDMA_READ_RESPONSE_FIRST        resp read-resp    first  data   rxe  BTH AETH
0x0e RC_RDMA_READ_RESPONSE_MIDDLE       resp read-resp    middle data   rxe  BTH
0x0f RC_RDMA_READ_RESPONSE_LAST         resp read-resp    last   data   rxe  BTH AETH
0x10 RC_RDMA_READ_RESPONSE_ONLY         resp read-resp    only   data   rxe  BTH AETH
0x11 RC_ACKNOWLEDGE                     resp ack          only   nodata rxe  BTH AETH
0x12 RC_ATOMIC_ACKNOWLEDGE              resp atomic-ack   only   nodata rxe  BTH AETH AtomicAckETH
0x13 RC_COMPARE_SWAP                    req  atomic       only   nodata rxe  BTH AtomicETH
0x14 RC_FETCH_ADD                       req  atomic       only   nodata rxe  BTH AtomicETH
0x16 RC_SEND_LAST_WITH_INVALIDATE       req  send         last   data   rxe  BTH IETH
0x17 RC_SEND_ONLY_WITH_INVALIDATE       req  send         only   data   rxe  BTH IETH
0x1c RC_FLUSH                           req  flush        only   nodata rxe  BTH FETH RETH
0x1d RC_ATOMIC_WRITE                    req  atomic-write only   data   rxe  BTH RETH
0x20 UC_SEND_FIRST                      req  send         first  data   rxe  BTH
0x21 UC_SEND_MIDDLE                     req  send         middle data   rxe  BTH
0x22 UC_SEND_LAST                       req  send         last   data   rxe  BTH
0x23 UC_SEND_LAST_WITH_IMMEDIATE        req  send         last   data   rxe  BTH ImmDt
0x24 UC_SEND_ONLY                       req  send         only   data   rxe  BTH
0x25 UC_SEND_ONLY_WITH_IMMEDIATE        req  send         only   data   rxe  BTH ImmDt
0x26 UC_RDMA_WRITE_FIRST                req  write        first  data   rxe  BTH RETH
0x27 UC_RDMA_WRITE_MIDDLE               req  write        middle data   rxe  BTH
0x28 UC_RDMA_WRITE_LAST                 req  write        last   data   rxe  BTH
0x29 UC_RDMA_WRITE_LAST_WITH_IMMEDIATE  req  write        last   data   rxe  BTH ImmDt
0x2a UC_RDMA_WRITE_ONLY                 req  write        only   data   rxe  BTH RETH
0x2b UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE  req  write        only   data   rxe  BTH RETH ImmDt
0x64 UD_SEND_ONLY                       req  send         only   data   rxe  BTH DETH
0x65 UD_SEND_ONLY_WITH_IMMEDIATE        req  send         only   data   rxe  BTH DETH ImmDt
0x81 CNP                                cnp  cnp          only   nodata -    BTH Reserved16
0xa0 XRC_SEND_FIRST                     req  send         first  data   -    BTH XRCETH
0xa1 XRC_SEND_MIDDLE                    req  send         middle data   -    BTH XRCETH
0xa2 XRC_SEND_LAST                      req  send         last   data   -    BTH XRCETH
0xa3 XRC_SEND_LAST_WITH_IMMEDIATE       req  send         last   data   -    BTH XRCETH ImmDt
0xa4 XRC_SEND_ONLY                      req  send         only   data   -    BTH XRCETH
0xa5 XRC_SEND_ONLY_WITH_IMMEDIATE       req  send         only   data   -    BTH XRCETH ImmDt
0xa6 XRC_RDMA_WRITE_FIRST               req  write        first  data   -    BTH XRCETH RETH
0xa7 XRC_RDMA_WRITE_MIDDLE              req  write        middle data   -    BTH XRCETH
0xa8 XRC_RDMA_WRITE_LAST                req  write        last   data   -    BTH XRCETH
0xa9 XRC_RDMA_WRITE_LAST_WITH_IMMEDIATE req  write        last   data   -    BTH XRCETH ImmDt
0xaa XRC_RDMA_WRITE_ONLY                req  write        only   data   -    BTH XRCETH RETH
0xab XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE req  write        only   data   -    BTH XRCETH RETH ImmDt
0xac XRC_RDMA_READ_REQUEST              req  read-req     only   nodata -    BTH XRCETH RETH
0xad XRC_RDMA_READ_RESPONSE_FIRST       resp read-resp    first  data   -    BTH AETH
0xae XRC_RDMA_READ_RESPONSE_MIDDLE      resp read-resp    middle data   -    BTH
0xaf XRC_RDMA_READ_RESPONSE_LAST        resp read-resp    last   data   -    BTH AETH
0xb0 XRC_RDMA_READ_RESPONSE_ONLY        resp read-resp    only   data   -    BTH AETH
0xb1 XRC_ACKNOWLEDGE                    resp ack          only   nodata -    BTH AETH
0xb2 XRC_ATOMIC_ACKNOWLEDGE             resp atomic-ack   only   nodata -    BTH AETH AtomicAckETH
0xb3 XRC_COMPARE_SWAP                   req  atomic       only   nodata -    BTH XRCETH AtomicETH
0xb4 XRC_FETCH_ADD                      req  atomic       only   nodata -    BTH XRCETH AtomicETH
0xb6 XRC_SEND_LAST_WITH_INVALIDATE      req  send         last   data   -    BTH XRCETH IETH
0xb7 XRC_SEND_ONLY_WITH_INVALIDATE      req  send         only   data   -    BTH XRCETH IETH
)";

// Header sizes in bytes, IBA vol.1 9.3 and Annex A17.9.3.
const std::map<std::string, int> kHeaderBytes = {
    {"BTH", 12},  {"DETH", 8},       {"XRCETH", 4},      {"RETH", 16},
    {"FETH", 4},  {"AtomicETH", 28}, {"AETH", 4},        {"AtomicAckETH", 8},
    {"ImmDt", 4}, {"IETH", 4},       {"Reserved16", 16},
};

struct Expected {
    std::string name;
    std::string direction;
    std::string family;
    std::string position;
    bool payload = false;
    bool rxe = false;
    std::vector<std::string> headers;  // after the BTH
};

std::map<int, Expected> spec_table() {
    std::map<int, Expected> table;
    std::istringstream lines(kSpecTable);
    std::string line;
    while (std::getline(lines, line)) {
        if (line.empty()) {
            continue;
        }
        std::istringstream in(line);
        std::string op, data, rxe, bth, h;
        Expected e;
        in >> op >> e.name >> e.direction >> e.family >> e.position >> data >> rxe >> bth;
        e.payload = data == "data";
        e.rxe = rxe == "rxe";
        EXPECT_EQ(bth, "BTH") << line;
        while (in >> h) {
            e.headers.push_back(h);
        }
        table[std::stoi(op, nullptr, 16)] = e;
    }
    return table;
}

std::string direction_word(Direction d) {
    switch (d) {
        case Direction::kRequest:
            return "req";
        case Direction::kResponse:
            return "resp";
        case Direction::kNotification:
            return "cnp";
    }
    return "?";
}

std::string family_word(Family f) {
    switch (f) {
        case Family::kSend:
            return "send";
        case Family::kWrite:
            return "write";
        case Family::kReadRequest:
            return "read-req";
        case Family::kReadResponse:
            return "read-resp";
        case Family::kAtomic:
            return "atomic";
        case Family::kAtomicAck:
            return "atomic-ack";
        case Family::kAck:
            return "ack";
        case Family::kFlush:
            return "flush";
        case Family::kAtomicWrite:
            return "atomic-write";
        case Family::kCnp:
            return "cnp";
    }
    return "?";
}

std::string position_word(Position p) {
    switch (p) {
        case Position::kFirst:
            return "first";
        case Position::kMiddle:
            return "middle";
        case Position::kLast:
            return "last";
        case Position::kOnly:
            return "only";
    }
    return "?";
}

std::string header_word(ExtHeader h) {
    // The library's own names, except the CNP filler the table calls Reserved16.
    return h == ExtHeader::kCnpReserved ? "Reserved16" : ext_header_name(h);
}

TEST(wireOpcode, EveryOpcodeByteMatchesTheSpecTable) {
    const std::map<int, Expected> spec = spec_table();
    ASSERT_EQ(spec.size(), 63u);
    int known = 0;
    for (int op = 0; op < 256; ++op) {
        SCOPED_TRACE(testing::Message() << "opcode 0x" << std::hex << op);
        const OpcodeInfo* info = opcode_info(static_cast<uint8_t>(op));
        const auto it = spec.find(op);
        if (it == spec.end()) {
            EXPECT_EQ(info, nullptr);
            continue;
        }
        ++known;
        ASSERT_NE(info, nullptr);
        const Expected& e = it->second;
        EXPECT_EQ(info->opcode, op);
        EXPECT_EQ(info->name, e.name);
        EXPECT_EQ(direction_word(info->direction()), e.direction);
        EXPECT_EQ(family_word(info->family), e.family);
        EXPECT_EQ(position_word(info->position), e.position);
        EXPECT_EQ(info->payload, e.payload);
        EXPECT_EQ(info->in_rxe, e.rxe);

        std::vector<std::string> headers;
        for (size_t i = 0; i < info->header_count; ++i) {
            headers.push_back(header_word(info->headers[i]));
            EXPECT_TRUE(info->has(info->headers[i]));
            EXPECT_EQ(ext_header_bytes(info->headers[i]),
                      static_cast<size_t>(kHeaderBytes.at(headers.back())));
        }
        EXPECT_EQ(headers, e.headers);

        int bytes = kHeaderBytes.at("BTH");
        for (const std::string& h : e.headers) {
            bytes += kHeaderBytes.at(h);
        }
        EXPECT_EQ(info->header_bytes, bytes);
    }
    EXPECT_EQ(known, 63);
}

TEST(wireOpcode, HasAnswersOnlyForListedHeaders) {
    const OpcodeInfo* info = opcode_info(0x0b);  // RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE
    ASSERT_NE(info, nullptr);
    EXPECT_TRUE(info->has(ExtHeader::kReth));
    EXPECT_TRUE(info->has(ExtHeader::kImmDt));
    EXPECT_FALSE(info->has(ExtHeader::kAeth));
    EXPECT_FALSE(info->has(ExtHeader::kXrceth));
}

TEST(wireOpcode, ReliableDatagramAndReservedOpcodesAreUnknown) {
    for (int op = 0x40; op < 0x60; ++op) {
        EXPECT_EQ(opcode_info(static_cast<uint8_t>(op)), nullptr) << op;
    }
    for (int op : {0x15, 0x18, 0x1b, 0x1e, 0x1f, 0x2c, 0x60, 0x63, 0x66, 0x80, 0x82, 0xb5, 0xc0,
                   0xe0, 0xff}) {
        EXPECT_EQ(opcode_info(static_cast<uint8_t>(op)), nullptr) << op;
    }
}

TEST(wireOpcode, ServiceIsTheTopThreeBits) {
    const Service by_top_bits[8] = {Service::kRc,       Service::kUc,          Service::kRd,
                                    Service::kUd,       Service::kCnp,         Service::kXrc,
                                    Service::kReserved, Service::kManufacturer};
    for (int op = 0; op < 256; ++op) {
        const Service t = opcode_service(static_cast<uint8_t>(op));
        EXPECT_EQ(t, by_top_bits[op / 32]) << op;
        const OpcodeInfo* info = opcode_info(static_cast<uint8_t>(op));
        if (info != nullptr) {
            EXPECT_EQ(info->service(), t);
        }
    }
    EXPECT_EQ(static_cast<int>(Service::kRc), 0x00);
    EXPECT_EQ(static_cast<int>(Service::kUc), 0x20);
    EXPECT_EQ(static_cast<int>(Service::kRd), 0x40);
    EXPECT_EQ(static_cast<int>(Service::kUd), 0x60);
    EXPECT_EQ(static_cast<int>(Service::kCnp), 0x80);
    EXPECT_EQ(static_cast<int>(Service::kXrc), 0xa0);
}

TEST(wireOpcode, HeaderNamesAreDistinct) {
    const ExtHeader all[] = {ExtHeader::kDeth,         ExtHeader::kXrceth,    ExtHeader::kReth,
                             ExtHeader::kFeth,         ExtHeader::kAtomicEth, ExtHeader::kAeth,
                             ExtHeader::kAtomicAckEth, ExtHeader::kImmDt,     ExtHeader::kIeth,
                             ExtHeader::kCnpReserved};
    std::map<std::string, int> seen;
    for (ExtHeader h : all) {
        EXPECT_EQ(++seen[ext_header_name(h)], 1) << ext_header_name(h);
    }
}

}  // namespace
}  // namespace uroce::wire

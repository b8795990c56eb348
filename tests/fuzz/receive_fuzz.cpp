// libFuzzer target for the daemon's receive path: each input is a few
// datagrams handed to Engine::receive_datagram, against the setup of
// tests/unit/receive_harness.h with a READ, an atomic, a WRITE and a SEND
// outstanding on the RTS QP and receives posted on the RTR QP. Crashes and
// sanitizer reports are findings; so is any change to memory outside the
// registered region, which aborts.
//
// Input: records of [control][length, 2 bytes little endian][datagram].
//   control bit 0: recompute the ICRC (else the datagram's own bytes stand)
//   control bit 1: from another host than the QPs' peer
//   control bits 2-4: 0 keep the BTH's destination QP, else replace it with
//     the RTR, RTS, RESET, INIT or no-access QP (1..5)
// UROCE_FUZZ_SEEDS=<dir> writes a seed corpus of valid packets and exits.
#include <stdio.h>
#include <stdlib.h>

#include <string>
#include <vector>

#include "receive_harness.h"

namespace {

using uroce::test::ReceiveHarness;
using uroce::wire::Operation;

constexpr size_t kMaxRecords = 8;

ReceiveHarness& harness() {
    // One setup for the whole run: building an engine per input is too slow.
    static ReceiveHarness* h = new ReceiveHarness();
    return *h;
}

void post(ReceiveHarness& h, uint64_t wr_id, ibv_wr_opcode opcode, size_t offset, uint32_t length) {
    uroce::queues::SendWqe wqe{};
    wqe.wr_id = wr_id;
    wqe.opcode = opcode;
    wqe.send_flags = IBV_SEND_SIGNALED;
    wqe.remote_addr = 0x10000;
    wqe.rkey = 0x1234;
    wqe.compare_add = 1;
    h.post_send(h.rts(), wqe, offset, length);
}

// Every input starts from the same QP states, queues and memory.
void reset(ReceiveHarness& h) {
    h.reconnect(h.rtr(), IBV_QPS_RTR);
    h.reconnect(h.rts(), IBV_QPS_RTS);
    h.reconnect(h.no_access(), IBV_QPS_RTR, 0);
    memset(h.region(), ReceiveHarness::kRegionFill, ReceiveHarness::kRegionBytes);
    h.post_recv(h.rtr(), 1, 0, 600);
    h.post_recv(h.rtr(), 2, 1024, 16);
    // PSNs kSqPsn..+1 (READ of two MTUs), +2 (atomic), +3..+4 (WRITE), +5 (SEND).
    post(h, 3, IBV_WR_RDMA_READ, 2048, 2 * ReceiveHarness::kMtuBytes);
    post(h, 4, IBV_WR_ATOMIC_FETCH_AND_ADD, 3072, 8);
    post(h, 5, IBV_WR_RDMA_WRITE, 0, 300);
    post(h, 6, IBV_WR_SEND, 0, 64);
    h.settle();
    h.answers(0);
    h.poll_cq();
    h.async_events();
}

uint32_t qpn_for(ReceiveHarness& h, unsigned choice) {
    switch (choice) {
        case 1:
            return h.rtr().qpn;
        case 2:
            return h.rts().qpn;
        case 3:
            return h.reset().qpn;
        case 4:
            return h.init().qpn;
        default:
            return h.no_access().qpn;
    }
}

void append_record(std::vector<uint8_t>& out, uint8_t control, const std::vector<uint8_t>& d) {
    out.push_back(control);
    out.push_back(static_cast<uint8_t>(d.size()));
    out.push_back(static_cast<uint8_t>(d.size() >> 8));
    out.insert(out.end(), d.begin(), d.end());
}

// One file per request and response kind, each a valid packet for its QP.
void write_seeds(ReceiveHarness& h, const char* dir) {
    struct Seed {
        const char* name;
        Operation op;
        bool to_rts;
        size_t payload;
    };
    const Seed seeds[] = {
        {"send_only", Operation::kSendOnly, false, 40},
        {"send_first", Operation::kSendFirst, false, ReceiveHarness::kMtuBytes},
        {"write_only", Operation::kWriteOnly, false, 64},
        {"write_first", Operation::kWriteFirst, false, ReceiveHarness::kMtuBytes},
        {"write_imm", Operation::kWriteOnlyImm, false, 16},
        {"read_request", Operation::kReadRequest, false, 0},
        {"fetch_add", Operation::kFetchAdd, false, 0},
        {"compare_swap", Operation::kCompareSwap, false, 0},
        {"ack", Operation::kAck, true, 0},
        {"read_response_first", Operation::kReadResponseFirst, true, ReceiveHarness::kMtuBytes},
        {"read_response_only", Operation::kReadResponseOnly, true, 8},
        {"atomic_ack", Operation::kAtomicAck, true, 0},
    };
    for (const Seed& s : seeds) {
        uroce::wire::PacketHeaders hdr{};
        hdr.bth.opcode = uroce::wire::make_opcode(uroce::wire::Service::kRc, s.op);
        hdr.bth.dest_qp = s.to_rts ? h.rts().qpn : h.rtr().qpn;
        hdr.bth.psn = s.to_rts ? ReceiveHarness::kSqPsn : ReceiveHarness::kRqPsn;
        hdr.bth.ack_req = true;
        hdr.reth = {h.region_va(), h.rkey(), static_cast<uint32_t>(s.payload ? s.payload : 64)};
        hdr.atomic_eth = {h.region_va() + 64, h.rkey(), 1, 0};
        hdr.aeth = uroce::wire::Aeth::ack(1);
        std::vector<uint8_t> input;
        append_record(input, 1, h.build(hdr, std::vector<uint8_t>(s.payload, 0x33)));
        const std::string path = std::string(dir) + "/" + s.name;
        FILE* f = fopen(path.c_str(), "wb");
        if (!f || fwrite(input.data(), 1, input.size(), f) != input.size() || fclose(f) != 0) {
            perror(path.c_str());
            exit(1);
        }
    }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    if (const char* dir = getenv("UROCE_FUZZ_SEEDS")) {
        write_seeds(harness(), dir);
        exit(0);
    }
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    ReceiveHarness& h = harness();
    reset(h);
    size_t pos = 0;
    for (size_t records = 0; records < kMaxRecords && pos + 3 <= size; ++records) {
        const uint8_t control = data[pos];
        const size_t length = std::min<size_t>(data[pos + 1] | data[pos + 2] << 8, size - pos - 3);
        std::vector<uint8_t> datagram(data + pos + 3, data + pos + 3 + length);
        pos += 3 + length;
        const unsigned qp_choice = (control >> 2) & 7;
        if (qp_choice && datagram.size() >= uroce::wire::kBthBytes) {
            const uint32_t qpn = qpn_for(h, qp_choice);
            datagram[5] = static_cast<uint8_t>(qpn >> 16);
            datagram[6] = static_cast<uint8_t>(qpn >> 8);
            datagram[7] = static_cast<uint8_t>(qpn);
        }
        const uint32_t src = uroce::test::loopback(control & 2 ? 10 : ReceiveHarness::kForgerHost);
        if (control & 1) {
            h.seal(datagram, src);
        }
        h.inject(datagram, src);
    }
    h.answers(0);
    h.poll_cq();
    h.async_events();
    if (const std::string damage = h.memory_outside_region_damage(); !damage.empty()) {
        fprintf(stderr, "memory outside the registered region changed: %s\n", damage.c_str());
        abort();
    }
    return 0;
}

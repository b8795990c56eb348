// uroced_planted: uroced with daemon bugs planted on purpose, for the tests
// that --paranoid catches them (test_fuzzing):
// - a SEND with immediate data 0x0badc0de makes the requester believe that
//   PSNs it never sent were acknowledged. Without --paranoid the program
//   merely sees its QP fail later, as if the network or the peer were at
//   fault;
// - one with 0x0badf00d makes the requester count a packet on a device of
//   another engine, from its own thread: a data race that --paranoid's
//   ownership check (util/ownership.h) stops.
#include <arpa/inet.h>

#include "device/device.h"
#include "transport/invariants.h"
#include "wire/psn.h"

namespace {

constexpr uint32_t kAcknowledgeTheUnsent = 0x0badc0de;
constexpr uint32_t kTouchAnotherEngine = 0x0badf00d;

// A device of another engine than `device`'s, found through the QPs'
// doorbell slots; null when there is none.
uroce::Device* device_of_another_engine(const uroce::Device& device) {
    const uroce::Doorbell& doorbell = *device.doorbell();
    for (uint32_t slot = 0; slot < uroce::queues::kDoorbellSlots; ++slot) {
        const uroce::Doorbell::Owner owner = doorbell.owner(slot);
        if (owner.device && owner.device->engine() != device.engine()) {
            return owner.device;
        }
    }
    return nullptr;
}

void planted(uroce::Device& device, uroce::Qp& qp, uroce::transport::SendWork& work) {
    if (work.wqe.opcode != IBV_WR_SEND_WITH_IMM) {
        return;
    }
    // However the program laid out its immediate data (it is big-endian on the wire).
    const uint32_t imm = work.wqe.imm_data;
    if (imm == kAcknowledgeTheUnsent || ntohl(imm) == kAcknowledgeTheUnsent) {
        qp.requester.unacked_psn = uroce::wire::psn_add(qp.requester.sent_psn_end, 5);
    } else if (imm == kTouchAnotherEngine || ntohl(imm) == kTouchAnotherEngine) {
        if (uroce::Device* other = device_of_another_engine(device)) {
            ++other->stats().sent_pkts;
        }
    }
}

const bool planted_bugs = (uroce::transport::planted_bug = planted, true);

}  // namespace

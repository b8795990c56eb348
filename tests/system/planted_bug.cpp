// uroced_planted: uroced with a daemon bug planted on purpose, for the test
// that --paranoid catches it and names the case (test_fuzzing). A SEND with
// immediate data 0x0badc0de makes the requester believe that PSNs it never
// sent were acknowledged. Without --paranoid the program merely sees its QP
// fail later, as if the network or the peer were at fault.
#include <arpa/inet.h>

#include "transport/invariants.h"
#include "wire/psn.h"

namespace {

constexpr uint32_t kTrigger = 0x0badc0de;

void acknowledge_the_unsent(uroce::Qp& qp, uroce::transport::SendWork& work) {
    // However the program laid out its immediate data (it is big-endian on the wire).
    const uint32_t imm = work.wqe.imm_data;
    if (work.wqe.opcode == IBV_WR_SEND_WITH_IMM && (imm == kTrigger || ntohl(imm) == kTrigger)) {
        qp.requester.unacked_psn = uroce::wire::psn_add(qp.requester.sent_psn_end, 5);
    }
}

const bool planted = (uroce::transport::planted_bug = acknowledge_the_unsent, true);

}  // namespace

#include "control/coverage_map.h"

#include <string.h>

#include <nlohmann/json.hpp>

#include "cm/connection_manager.h"
#include "control/dispatcher.h"
#include "protocol/work_requests.h"
#include "qp/qp_transitions.h"
#include "util/case_tag.h"
#include "util/coverage.h"
#include "wire/headers.h"
#include "wire/opcode.h"

namespace uroce {
namespace {

using coverage::Area;

static_assert(coverage::kIds <= rpc::kMaxCoverageIds);
static_assert(static_cast<uint32_t>(rpc::Op::kCount) <= coverage::kOps);

constexpr ibv_qp_type kQpTypes[coverage::kQpTypes] = {
    IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD, IBV_QPT_RAW_PACKET, IBV_QPT_XRC_SEND, IBV_QPT_XRC_RECV};

constexpr const char* kQpOutcomes[] = {"accepted",
                                       "refused: not allowed",
                                       "refused: missing attribute",
                                       "refused: extra attribute",
                                       "refused: bad value",
                                       "refused"};
static_assert(std::size(kQpOutcomes) == size_t(coverage::QpOutcome::kCount));

constexpr const char* kResponderOutcomes[] = {"ACK",
                                              "RNR NAK",
                                              "NAK PSN sequence error",
                                              "NAK invalid request",
                                              "NAK remote access error",
                                              "NAK remote operational error",
                                              "NAK invalid RD request",
                                              "atomic ACK",
                                              "READ response",
                                              "duplicate request answered",
                                              "error: invalid request",
                                              "error: remote access",
                                              "error: remote operational",
                                              "UC message dropped",
                                              "UD datagram delivered",
                                              "UD datagram dropped"};
static_assert(std::size(kResponderOutcomes) == size_t(coverage::ResponderOutcome::kCount));

// enum ibv_wc_status and ibv_event_type without their prefixes.
constexpr const char* kWcStatuses[] = {"SUCCESS",
                                       "LOC_LEN_ERR",
                                       "LOC_QP_OP_ERR",
                                       "LOC_EEC_OP_ERR",
                                       "LOC_PROT_ERR",
                                       "WR_FLUSH_ERR",
                                       "MW_BIND_ERR",
                                       "BAD_RESP_ERR",
                                       "LOC_ACCESS_ERR",
                                       "REM_INV_REQ_ERR",
                                       "REM_ACCESS_ERR",
                                       "REM_OP_ERR",
                                       "RETRY_EXC_ERR",
                                       "RNR_RETRY_EXC_ERR",
                                       "LOC_RDD_VIOL_ERR",
                                       "REM_INV_RD_REQ_ERR",
                                       "REM_ABORT_ERR",
                                       "INV_EECN_ERR",
                                       "INV_EEC_STATE_ERR",
                                       "FATAL_ERR",
                                       "RESP_TIMEOUT_ERR",
                                       "GENERAL_ERR",
                                       "TM_ERR",
                                       "TM_RNDV_INCOMPLETE"};
static_assert(std::size(kWcStatuses) == coverage::kWcStatuses);

constexpr const char* kEvents[] = {"CQ_ERR",
                                   "QP_FATAL",
                                   "QP_REQ_ERR",
                                   "QP_ACCESS_ERR",
                                   "COMM_EST",
                                   "SQ_DRAINED",
                                   "PATH_MIG",
                                   "PATH_MIG_ERR",
                                   "DEVICE_FATAL",
                                   "PORT_ACTIVE",
                                   "PORT_ERR",
                                   "LID_CHANGE",
                                   "PKEY_CHANGE",
                                   "SM_CHANGE",
                                   "SRQ_ERR",
                                   "SRQ_LIMIT_REACHED",
                                   "QP_LAST_WQE_REACHED",
                                   "CLIENT_REREGISTER",
                                   "GID_CHANGE",
                                   "WQ_FATAL"};
static_assert(std::size(kEvents) == IBV_EVENT_WQ_FATAL + 1);

// The completion opcodes uroce reports, by coverage index.
struct WcOpcode {
    uint32_t opcode;
    const char* name;
};
constexpr WcOpcode kWcOpcodes[] = {
    {IBV_WC_SEND, "SEND"},           {IBV_WC_RDMA_WRITE, "RDMA_WRITE"},
    {IBV_WC_RDMA_READ, "RDMA_READ"}, {IBV_WC_COMP_SWAP, "COMP_SWAP"},
    {IBV_WC_FETCH_ADD, "FETCH_ADD"}, {IBV_WC_BIND_MW, "BIND_MW"},
    {IBV_WC_LOCAL_INV, "LOCAL_INV"}, {UROCE_WC_ATOMIC_WRITE, "ATOMIC_WRITE"},
    {IBV_WC_RECV, "RECV"},           {IBV_WC_RECV_RDMA_WITH_IMM, "RECV_RDMA_WITH_IMM"}};

constexpr const char* kCmMessages[] = {"REQ",  "MRA",      "REJ",      "REP", "RTU", "DREQ",
                                       "DREP", "SIDR_REQ", "SIDR_REP", "LAP", "APR", "other MAD"};
static_assert(std::size(kCmMessages) == coverage::kCmMessages);

std::string errno_name(uint32_t index) {
    if (index >= coverage::kRefusalErrnos.size()) {
        return "other errno";
    }
    const char* name = strerrorname_np(coverage::kRefusalErrnos[index]);
    return name ? name : "errno " + std::to_string(coverage::kRefusalErrnos[index]);
}

std::string packet_name(uint32_t opcode) {
    const wire::OpcodeInfo* info = wire::opcode_info(static_cast<uint8_t>(opcode));
    char hex[8];
    snprintf(hex, sizeof(hex), "0x%02x", opcode);
    return info ? std::string(info->name) + " (" + hex + ")" : std::string(hex) + " (reserved)";
}

// Adds the entries of each area, in id order.
class Builder {
  public:
    void add(Area area, uint32_t index, std::string name) {
        entries.push_back({coverage::first_id(area) + index, area_name(area), std::move(name)});
    }
    std::vector<CoverageEntry> entries;

  private:
    static const char* area_name(Area area) {
        static constexpr const char* names[] = {
            "qp_transition",       "work_request", "packet_sent", "packet_received",
            "responder",           "completion",   "async_event", "cm_message_sent",
            "cm_message_received", "cm_state",     "cm_id_state", "refusal"};
        static_assert(std::size(names) == size_t(Area::kCount));
        return names[static_cast<size_t>(area)];
    }
};

void add_qp_areas(Builder& b) {
    using coverage::kQpStates;
    for (uint32_t t = 0; t < coverage::kQpTypes; ++t) {
        const std::string type = qp_type_name(kQpTypes[t]);
        for (uint32_t from = 0; from < kQpStates; ++from) {
            for (uint32_t to = 0; to < kQpStates; ++to) {
                const std::string move = type + " " + qp_state_name(ibv_qp_state(from)) + "->" +
                                         qp_state_name(ibv_qp_state(to)) + " ";
                for (uint32_t o = 0; o < std::size(kQpOutcomes); ++o) {
                    b.add(Area::kQpTransition,
                          ((t * kQpStates + from) * kQpStates + to) * std::size(kQpOutcomes) + o,
                          move + kQpOutcomes[o]);
                }
            }
        }
    }
    for (uint32_t t = 0; t < coverage::kQpTypes; ++t) {
        for (uint32_t opcode = 0; opcode < coverage::kWrOpcodes; ++opcode) {
            const wr::OpcodeInfo* row = wr::opcode_info(opcode);
            const std::string name = opcode == coverage::kWrReceive ? "RECV"
                                     : row                          ? row->name
                                           : "opcode " + std::to_string(opcode);
            b.add(Area::kWorkRequest, t * coverage::kWrOpcodes + opcode,
                  std::string(qp_type_name(kQpTypes[t])) + " " + name);
        }
    }
}

void add_packet_areas(Builder& b) {
    for (uint32_t opcode = 0; opcode < 256; ++opcode) {
        b.add(Area::kPacketSent, opcode, packet_name(opcode));
    }
    for (uint32_t opcode = 0; opcode < 256; ++opcode) {
        b.add(Area::kPacketReceived, opcode, packet_name(opcode));
    }
    for (uint32_t o = 0; o < std::size(kResponderOutcomes); ++o) {
        b.add(Area::kResponder, o, kResponderOutcomes[o]);
    }
    for (const WcOpcode& opcode : kWcOpcodes) {
        for (uint32_t status = 0; status < coverage::kWcStatuses; ++status) {
            b.add(Area::kCompletion,
                  coverage::wc_opcode_index(opcode.opcode) * coverage::kWcStatuses + status,
                  std::string(opcode.name) + " " + kWcStatuses[status]);
        }
    }
    for (uint32_t event = 0; event < std::size(kEvents); ++event) {
        b.add(Area::kAsyncEvent, event, kEvents[event]);
    }
}

void add_cm_areas(Builder& b) {
    for (Area area : {Area::kCmMessageSent, Area::kCmMessageReceived}) {
        for (uint32_t m = 0; m < coverage::kCmMessages; ++m) {
            b.add(area, m, kCmMessages[m]);
        }
    }
    for (uint32_t from = 0; from < coverage::kCmStates; ++from) {
        for (uint32_t to = 0; to < coverage::kCmStates; ++to) {
            b.add(Area::kCmState, from * coverage::kCmStates + to,
                  std::string(cm::name(cm::CmState(from))) + "->" + cm::name(cm::CmState(to)));
        }
    }
    for (uint32_t from = 0; from < coverage::kCmIdStates; ++from) {
        for (uint32_t to = 0; to < coverage::kCmIdStates; ++to) {
            b.add(Area::kCmIdState, from * coverage::kCmIdStates + to,
                  std::string(cm::name(cm::IdState(from))) + "->" + cm::name(cm::IdState(to)));
        }
    }
}

void add_refusals(Builder& b) {
    for (uint32_t op = 0; op < static_cast<uint32_t>(rpc::Op::kCount); ++op) {
        const char* verb = verb_name(rpc::Op(op));
        if (!verb) {
            continue;
        }
        for (uint32_t error = 0; error < coverage::kRefusalClasses; ++error) {
            b.add(Area::kRefusal, op * coverage::kRefusalClasses + error,
                  std::string(verb) + " " + errno_name(error));
        }
    }
}

}  // namespace

const std::vector<CoverageEntry>& coverage_entries() {
    static const std::vector<CoverageEntry> entries = [] {
        Builder b;
        add_qp_areas(b);
        add_packet_areas(b);
        add_cm_areas(b);
        add_refusals(b);
        return std::move(b.entries);
    }();
    return entries;
}

std::string coverage_map_json() {
    nlohmann::json entries = nlohmann::json::array();
    for (const CoverageEntry& entry : coverage_entries()) {
        entries.push_back({{"id", entry.id}, {"area", entry.area}, {"name", entry.name}});
    }
    return nlohmann::json{{"ids", coverage::kIds}, {"entries", std::move(entries)}}.dump();
}

Result read_coverage(const rpc::CoverageRequest& request, rpc::CoverageReply& reply) {
    const std::string case_id(request.case_id, strnlen(request.case_id, sizeof(request.case_id)));
    std::shared_ptr<coverage::Counts> kept;
    if (!case_id.empty() && !(kept = case_map(case_id))) {
        return fail(ENOENT,
                    "no coverage is kept for case %s: no program of it has opened a device or an "
                    "rdma_cm channel, or %zu cases since have",
                    case_id.c_str(), kCaseMaps);
    }
    coverage::Counts& counts = kept ? *kept : coverage::counts();
    reply.ids = coverage::kIds;
    for (uint32_t id = 0; id < coverage::kIds; ++id) {
        reply.counts[id] = request.clear ? counts.take(id) : counts.count(id);
    }
    return ok();
}

}  // namespace uroce

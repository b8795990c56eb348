// The control protocol between the provider (and the uroce tool) and uroced.
//
// One request and one reply per SOCK_SEQPACKET message on the daemon's Unix
// socket. A message is a header followed by a fixed-layout body; file
// descriptors (event pipes, XRC domain files, trace files, and in replies
// the memfds of shared queues) travel as SCM_RIGHTS. Both
// sides are built from this header, so libibverbs structures are carried as
// they are. A request whose size, magic or version does not match gets an
// error reply, never a dropped connection.
#pragma once

#include <infiniband/verbs.h>
#include <stddef.h>
#include <stdint.h>

#include <cstddef>
#include <type_traits>

#include "memory_access.h"  // same folder: the bridge includes this by another path

namespace uroce::rpc {

inline constexpr uint32_t kMagic = 0x45435255;  // "URCE"
inline constexpr uint16_t kVersion = 20;
inline constexpr size_t kMaxMessage = 64 * 1024;
inline constexpr size_t kMaxFds = 3;
inline constexpr size_t kMaxErrorText = 512;  // a cause and its fix
inline constexpr size_t kNameLen = 64;
inline constexpr size_t kMaxRwqIndTableSize = 256;
inline constexpr size_t kMaxRssKeyLen = 128;
inline constexpr size_t kMaxFlowAttr = 1024;  // an ibv_flow_attr and its specs
inline constexpr uint32_t kNoHandle = 0;
inline constexpr size_t kMaxStatsText = 32 * 1024;
inline constexpr int64_t kMaxFaultDelayUs = 10 * 1000 * 1000;

enum class Op : uint16_t {
    kHello = 1,
    kAttach,
    kStatus,
    kQueryDevice,
    kQueryPort,
    kAllocPd,
    kDeallocPd,
    kRegMr,
    kReregMr,
    kDeregMr,
    kAdviseMr,
    kAllocMw,
    kDeallocMw,
    kAllocDm,
    kFreeDm,
    kImportPd,
    kImportMr,
    kImportDm,
    kRegDmMr,
    kCreateCompChannel,
    kDestroyCompChannel,
    kCreateCq,
    kResizeCq,
    kModifyCq,
    kDestroyCq,
    kCreateSrq,
    kModifySrq,
    kQuerySrq,
    kDestroySrq,
    kCreateQp,
    kModifyQp,
    kQueryQp,
    kDestroyQp,
    kOpenQp,
    kCreateWq,
    kModifyWq,
    kDestroyWq,
    kCreateRwqIndTable,
    kDestroyRwqIndTable,
    kCreateAh,
    kDestroyAh,
    kOpenXrcd,
    kCloseXrcd,
    kAttachMcast,
    kDetachMcast,
    kCreateFlow,
    kDestroyFlow,
    // The tool's observability ops (any connection may send them).
    kStats,
    kSetFaults,
    kTraceStart,
    kTraceStop,
    kTraceQuery,
    // An rdma_cm event channel (the bridge's /dev/infiniband/rdma_cm).
    kCmOpen,
    kCmCommand,
    // RDMA netlink (the bridge's NETLINK_RDMA sockets): after this request
    // the connection carries netlink datagrams, as a kernel socket would.
    kNetlinkOpen,
    // Every QP as JSON (a report, like kStatus).
    kQpSnapshot,
    // Step mode on a device's outgoing packets, and what it holds (a JSON report).
    kStep,
    kWireSnapshot,
    // The web console (docs/console.md), for as long as this connection lasts.
    kConsoleStart,
    // A forked child's own connection to an rdma_cm event channel it inherited.
    kCmAttach,
    // Check mode (docs/check.md): a client's finding, and the tool's report
    // of the findings kept (JSON).
    kCheckFinding,
    kCheckReport,
    // Check mode: how a QP and its peer, a QP of this daemon, disagree.
    kCheckPeer,
    // The tool's reset of a device (or all): DeviceRequest, ResetReply.
    kReset,
    // The device's coverage (docs/fuzzing.md): the counts by id; the map
    // of ids and names (a JSON report).
    kCoverage,
    kCoverageMap,
    kCount,
};

struct RequestHeader {
    uint32_t magic;
    uint16_t version;
    Op op;
    uint32_t length;  // whole message, header included
    uint32_t seq;
};

struct ReplyHeader {
    uint32_t magic;
    uint16_t version;
    Op op;
    uint32_t length;
    uint32_t seq;
    int32_t error;                // 0 or a positive errno
    char message[kMaxErrorText];  // why, when error != 0
};

struct Empty {};

// Binds a connection to one device. fd[0]: write end of the async event pipe
// (the daemon writes struct ib_uverbs_async_event_desc records to it).
// The tool connects with an empty device name and no fd.
// `case_id`: the program's UROCE_CASE (protocol/case_id.h), or empty.
inline constexpr size_t kCaseIdLen = 64;
struct HelloRequest {
    char device[kNameLen];
    char case_id[kCaseIdLen];
    MemoryProbe memory;  // a program's (protocol/memory_access.h); the tool's is not read
};
// Reply fds for a device: [doorbell eventfd, doorbell page memfd] (see
// protocol/queues.h DoorbellPage).
struct HelloReply {
    uint32_t device_index;
    uint32_t check;  // 1: the daemon runs with --check, and asks its clients to check
    // Names the context for kAttach: a process forked from this one joins
    // the context with it over a connection of its own.
    uint64_t attach_token;
};

// A finding of a client in check mode (provider/check/check.h): the daemon logs it
// and keeps it for `uroce check`. `text` is the report as the program's
// stderr shows it, NUL-terminated.
inline constexpr size_t kMaxFindingText = 3000;
struct CheckFindingRequest {
    char kind[32];  // the class's name, "post-in-wrong-state", ...
    uint32_t qpn;   // the QP it is about, or 0
    uint32_t reserved;
    char text[kMaxFindingText];
};

// Check mode asks about a QP's peer (the QP of this daemon it is connected
// to, connected back to it): after ibv_modify_qp to RTR or RTS, the
// attributes on which they disagree, as sentences; after a completion with
// IBV_WC_REM_ACCESS_ERR, why the peer refused the access; at a UD QP's
// first send to a destination (ah_handle, remote_qpn, remote_qkey), whether
// that QP of this daemon takes the Q_Key; once the ring says the daemon
// found one (queues::RingHeader::check_findings), the RDMA WRITE of the QP
// that raced another QP's (transport/write_races.h), or the RNR NAK that
// made it wait long (kRnrWait, transport/completer.cpp), and its `seq`.
// Empty when they agree, or no such peer (or refusal, or race) is known.
enum class PeerQuestion : uint32_t { kAttributes, kRefusal, kUdQkey, kWriteRace, kRnrWait };
struct CheckPeerRequest {
    uint32_t qp_handle;
    PeerQuestion question;
    uint32_t ah_handle;  // kUdQkey's destination
    uint32_t remote_qpn;
    uint32_t remote_qkey;
    uint32_t reserved;
};
struct CheckPeerReply {
    uint32_t seq;  // kWriteRace, kRnrWait: the WQE's SendWqe::check_seq
    uint32_t reserved;
    char text[1024];
};

// A forked child's connection to the context its parent opened: as with a
// kernel's shared uverbs file, the child issues verbs on the same context
// (its objects, and the parent's), each acting for the child's pid. The
// context lives until its last connection closes. The reply carries the
// doorbell fds, as hello's does.
struct AttachRequest {
    char device[kNameLen];
    uint64_t attach_token;
    MemoryProbe memory;  // of the attaching process: a forked child, an importer
};

// Reports of any length, fetched a page at a time: kStatus (text) and
// kQpSnapshot (JSON, control/qp_snapshot.h: the QPs of `device`, every
// device's when empty, and only QP `qpn` when has_qpn) and kWireSnapshot
// (JSON: each device's step mode and the packets it holds, decoded). The request at
// offset 0 takes a snapshot that the connection's later pages read, so the
// pages agree however many clients come and go meanwhile. The reply body is
// a ReportReply followed by the page's bytes (no NUL).
struct ReportRequest {
    uint64_t offset;
    char device[kNameLen];
    uint32_t qpn;
    uint32_t has_qpn;
};
struct ReportReply {
    uint64_t total;  // bytes of the whole report
};
inline constexpr size_t kReportPageBytes = kMaxMessage - 1024;
static_assert(sizeof(ReplyHeader) + sizeof(ReportReply) + kReportPageBytes <= kMaxMessage);

struct QueryDeviceRequest {};
struct QueryDeviceReply {
    ibv_device_attr_ex attr;
};

struct QueryPortRequest {
    uint32_t port_num;
};
struct QueryPortReply {
    ibv_port_attr attr;
};

struct HandleRequest {  // every destroy/dealloc/close
    uint32_t handle;
};

struct AllocPdReply {
    uint32_t handle;
};

struct RegMrRequest {
    uint32_t pd;
    int32_t access;
    uint64_t addr;
    uint64_t length;
    uint64_t hca_va;
};
struct RegMrReply {
    uint32_t handle;
    uint32_t lkey;
    uint32_t rkey;
};

struct ReregMrRequest {
    uint32_t handle;
    int32_t flags;  // enum ibv_rereg_mr_flags
    uint32_t pd;
    int32_t access;
    uint64_t addr;
    uint64_t length;
};
struct ReregMrReply {
    uint32_t lkey;
    uint32_t rkey;
};

// ibv_advise_mr: at most kMaxAdviseSges ranges per call.
inline constexpr uint32_t kMaxAdviseSges = 64;
struct AdviseMrRequest {
    uint32_t pd;
    uint32_t advice;  // enum ibv_advise_mr_advice
    uint32_t flags;   // enum ibv_advise_mr_flag
    uint32_t num_sge;
    ibv_sge sges[kMaxAdviseSges];
};

// ibv_alloc_dm: the client maps the memory and names where; the daemon
// accounts it against the device's max_dm_size.
struct AllocDmRequest {
    uint64_t length;
    uint32_t log_align_req;
    uint32_t comp_mask;
    uint64_t addr;  // the mapping in the client
};
struct AllocDmReply {
    uint32_t handle;
};

// ibv_import_pd/mr/dm(3) on a context imported from this one's command
// descriptor (it attached to the same context): the handle (a
// HandleRequest) is checked and the object described. kImportPd answers Empty.
struct ImportMrReply {
    uint64_t addr;
    uint64_t length;
    uint32_t lkey;
    uint32_t rkey;
    uint32_t pd;
    int32_t access;
};
struct ImportDmReply {
    uint64_t addr;  // the mapping in the client
    uint64_t length;
};

struct RegDmMrRequest {
    uint32_t pd;
    uint32_t dm;
    uint64_t offset;
    uint64_t length;
    uint32_t access;
};

struct AllocMwRequest {
    uint32_t pd;
    int32_t type;
};
struct AllocMwReply {
    uint32_t handle;
    uint32_t rkey;
};

// fd[0]: write end of the channel's pipe; the daemon writes
// struct ib_uverbs_comp_event_desc records to it. The channel is named by
// the read end's descriptor number in the client.
struct CreateCompChannelRequest {
    int32_t channel_fd;
};
struct DestroyCompChannelRequest {
    int32_t channel_fd;
};

struct CreateCqRequest {
    uint64_t user_handle;  // the client's struct ibv_cq *, returned in events
    int32_t cqe;
    int32_t channel_fd;  // -1: none
    int32_t comp_vector;
    uint32_t comp_mask;  // enum ibv_cq_init_attr_mask
    uint64_t wc_flags;
    uint32_t flags;  // enum ibv_create_cq_attr_flags
};
// Reply fd: the completion ring (Cqe entries, then CqState).
struct CreateCqReply {
    uint32_t handle;
    int32_t cqe;
    uint32_t ring_entries;
};
struct ModifyCqRequest {
    uint32_t handle;
    ibv_modify_cq_attr attr;
};
struct ResizeCqRequest {
    uint32_t handle;
    int32_t cqe;
};
// Reply fd: the new completion ring, holding the completions not yet polled
// from the old one (the client's consumer index starts again at 0).
struct ResizeCqReply {
    int32_t cqe;
    uint32_t ring_entries;
};

struct CreateSrqRequest {
    uint64_t user_handle;
    uint32_t comp_mask;  // enum ibv_srq_init_attr_mask
    int32_t srq_type;
    uint32_t pd;
    uint32_t xrcd;
    uint32_t cq;
    ibv_srq_attr attr;
    ibv_tm_cap tm_cap;
};
// Reply fd: the receive ring.
struct CreateSrqReply {
    uint32_t handle;
    uint32_t srq_num;
    ibv_srq_attr attr;
    uint32_t ring_entries;
    uint32_t entry_size;
};
struct ModifySrqRequest {
    uint32_t handle;
    int32_t attr_mask;
    ibv_srq_attr attr;
};
// Reply fd, when ring_entries is not 0: a larger receive ring that replaces
// the SRQ's ring, holding the WQEs still pending in the old one.
struct ModifySrqReply {
    uint32_t ring_entries;
    uint32_t entry_size;
};
struct QuerySrqReply {
    ibv_srq_attr attr;
};

struct CreateQpRequest {
    uint64_t user_handle;
    int32_t qp_type;
    int32_t sq_sig_all;
    uint32_t pd;
    uint32_t send_cq;
    uint32_t recv_cq;
    uint32_t srq;
    uint32_t xrcd;
    uint32_t rwq_ind_tbl;
    ibv_qp_cap cap;
    uint32_t comp_mask;  // enum ibv_qp_init_attr_mask
    uint32_t create_flags;
    uint32_t max_tso_header;
    uint32_t source_qpn;
    uint64_t send_ops_flags;
    uint8_t rx_hash_function;
    uint8_t rx_hash_key_len;
    uint8_t rx_hash_key[kMaxRssKeyLen];
    uint64_t rx_hash_fields_mask;
};
// The shape of one shared ring.
struct RingShape {
    uint32_t entries;  // 0: no ring (and no fd for it)
    uint32_t entry_size;
};
// Reply fds: the send ring, then the receive ring, each only when it exists.
struct CreateQpReply {
    uint32_t handle;
    uint32_t qpn;
    uint32_t doorbell_slot;  // queues::DoorbellBits
    ibv_qp_cap cap;
    RingShape send_queue;
    RingShape recv_queue;
};
struct ModifyQpRequest {
    uint32_t handle;
    int32_t attr_mask;
    ibv_qp_attr attr;
};
struct QueryQpRequest {
    uint32_t handle;
    int32_t attr_mask;
};
struct QueryQpReply {
    ibv_qp_attr attr;
    ibv_qp_cap init_cap;
    int32_t sq_sig_all;
};

struct CreateWqRequest {
    uint64_t user_handle;
    int32_t wq_type;
    uint32_t max_wr;
    uint32_t max_sge;
    uint32_t pd;
    uint32_t cq;
    uint32_t comp_mask;  // enum ibv_wq_init_attr_mask
    uint32_t create_flags;
};
struct CreateWqReply {  // with the fd of the receive ring
    uint32_t handle;
    uint32_t wq_num;
    uint32_t max_wr;
    uint32_t max_sge;
    RingShape ring;
};
struct ModifyWqRequest {
    uint32_t handle;
    uint32_t attr_mask;  // enum ibv_wq_attr_mask
    int32_t wq_state;
    int32_t curr_wq_state;
    uint32_t flags;
    uint32_t flags_mask;
};

struct CreateRwqIndTableRequest {
    uint32_t log_size;
    uint32_t comp_mask;
    uint32_t wqs[kMaxRwqIndTableSize];
};
struct CreateRwqIndTableReply {
    uint32_t handle;
    uint32_t ind_tbl_num;
};

struct CreateAhRequest {
    uint32_t pd;
    ibv_ah_attr attr;
};
struct CreateAhReply {
    uint32_t handle;
};

// ibv_open_qp: an XRC_TGT QP by number, in an XRC domain.
struct OpenQpRequest {
    uint64_t user_handle;
    uint32_t xrcd;
    uint32_t qpn;
    uint32_t qp_type;
};
struct OpenQpReply {
    uint32_t handle;
};

// fd[0], when has_fd: the file that names a shared XRC domain.
struct OpenXrcdRequest {
    uint32_t comp_mask;  // enum ibv_xrcd_init_attr_mask
    int32_t has_fd;
    int32_t oflags;
};
struct OpenXrcdReply {
    uint32_t handle;
};

struct McastRequest {
    uint32_t qp;
    uint16_t lid;
    ibv_gid gid;
};

// The tool's requests about one device: kStats (an empty name means every
// device), kTraceStop, kTraceQuery, kReset.
struct DeviceRequest {
    char device[kNameLen];
};

// What `uroce reset` did: the devices reset, the clients (contexts) that
// lost their context, and how long it took.
struct ResetReply {
    uint32_t devices;
    uint32_t contexts;
    uint64_t microseconds;
};

// kCoverage: the daemon's coverage counts by id (util/coverage.h), or with
// a `case_id` those of that case alone (util/case_tag.h; ENOENT when none
// is kept), read and, when `clear`, set to 0 as they are read. kCoverageMap
// is a report (ReportRequest) of the map:
// {"ids": N, "entries": [{"id", "area", "name"}]}.
struct CoverageRequest {
    uint32_t clear;
    uint32_t reserved;
    char case_id[kCaseIdLen];  // empty: the daemon's
};
inline constexpr uint32_t kMaxCoverageIds = 12288;
struct CoverageReply {
    uint32_t ids;  // how many of `counts` the map uses
    uint32_t reserved;
    uint32_t counts[kMaxCoverageIds];
};

// The counters as text: per device its status header line, then
// "  <counter> <value>" lines in the order of device/stats.h. Fixed size,
// as every reply to a request with a body is (ControlClient::call).
struct StatsReply {
    char text[kMaxStatsText];  // NUL-terminated
};

// Faults injected on the device's outgoing packets (net/fault_injector.h);
// all zero clears them.
struct SetFaultsRequest {
    char device[kNameLen];
    double drop;  // probabilities, 0..1
    double duplicate;
    double reorder;
    int64_t delay_us;  // 0..kMaxFaultDelayUs
    // Non-zero `seeded`: each decision follows from `seed` and the packet
    // (net/fault_injector.h), the same in every run.
    uint64_t seed;
    uint32_t seeded;
    // Non-zero: replay the `replayed` ReplayedFaults in fd[0] (a memfd or
    // regular file) instead; every other field is zero.
    uint32_t replayed;
};

// One decision of a schedule `uroce fault --replay` loads: the packet by
// identity and attempt (net/fault_injector.h), and its fate.
struct ReplayedFault {
    uint32_t src_qpn;
    uint32_t dest_qpn;
    uint32_t psn_offset;
    uint32_t attempt;
    uint64_t mad_tid;
    uint8_t opcode;
    uint8_t drop;    // 0 or 1
    uint8_t copies;  // 1 or 2
    uint8_t reserved;
    uint32_t delay_us;  // up to kMaxFaultDelayUs
};
inline constexpr uint32_t kMaxReplayedFaults = 1 << 18;

// Step mode (net/step_gate.h): kPause holds the device's outgoing packets;
// kNext lets one go, kDrop loses one, kDuplicate sends a copy of one and
// keeps it; kRun lets every held packet go and stops holding. `packet`
// names a held packet by id, 0 the oldest.
enum class StepAction : uint32_t { kPause = 1, kNext, kDrop, kDuplicate, kRun };
struct StepRequest {
    char device[kNameLen];
    StepAction action;
    uint32_t reserved;
    uint64_t packet;
};
struct StepReply {
    uint64_t packet;  // the packet acted on (0: none; pause and run)
    uint32_t paused;  // after the action
    uint32_t held;
    char summary[kMaxErrorText];  // the packet acted on, in a line (NUL-terminated)
};

// Starts the web console on 127.0.0.1:port (0: a free port). It belongs to
// the connection that started it and closes with it.
struct ConsoleStartRequest {
    uint32_t read_only;
    uint32_t port;
};
struct ConsoleStartReply {
    uint32_t port;
    uint32_t reserved;
    char token[64];  // NUL-terminated
};

// kTraceStart: the files are opened for writing by the tool, so that they
// belong to the user; the daemon never opens a path. fd[0] is the pcap file
// if `files` has kTracePackets, the next the fault decisions'
// (net/fault_log.h) if it has kTraceFaults. The trace ends with kTraceStop
// or when the connection that started it closes. kTraceStop and kTraceQuery
// reply with the trace's state.
inline constexpr uint32_t kTracePackets = 1;
inline constexpr uint32_t kTraceFaults = 2;
struct TraceStartRequest {
    char device[kNameLen];
    uint32_t files;
    uint32_t reserved;
};
struct TraceReply {
    uint64_t packets;       // recorded so far
    uint32_t write_failed;  // 1: writing a file failed and recording to it stopped
    uint32_t reserved;
    uint64_t decisions;  // fault decisions recorded so far
};

// ibv_create_flow: the attribute and its specs as the application laid them out.
struct CreateFlowRequest {
    uint32_t qp;
    uint32_t size;
    std::byte attr[kMaxFlowAttr];
};
struct CreateFlowReply {
    uint32_t handle;
};

// rdma_cm: librdmacm writes commands of the kernel's ucma ABI
// (<rdma/rdma_user_cm.h>) to /dev/infiniband/rdma_cm; the bridge carries
// each to the daemon on a connection of its own, one per open of the node.
inline constexpr size_t kMaxCmCommand = 1024;     // rdma_ucm_cmd_hdr + `in` bytes
inline constexpr size_t kMaxCmOptionValue = 256;  // SET_OPTION's optval
inline constexpr size_t kMaxCmResponse = 1024;

// Makes the connection an event channel. fd[0]: the read end of a pipe,
// the program's descriptor of the channel. The daemon opens the pipe again
// for itself and keeps one byte in it while events wait.
struct CmOpenRequest {
    char case_id[kCaseIdLen];  // as in HelloRequest
};
struct CmOpenReply {
    // A secret that names the channel: in another channel's MIGRATE_ID, and
    // in kCmAttach.
    uint64_t channel_token;
};

// Makes the connection another of the event channel `channel_token` names:
// a process forked from the one that opened it, using the descriptor it
// inherited, gets a connection of its own, so that its requests and replies
// never cross its parent's. The channel lives until its last connection
// closes, as the kernel's file lives until its last descriptor does.
struct CmAttachRequest {
    uint64_t channel_token;
};

// One write(2), as the program wrote it (`length` bytes of `command`).
// GET_EVENT never blocks here: the bridge waits on the pipe itself.
struct CmCommandRequest {
    uint32_t length;
    uint32_t option_length;  // SET_OPTION: the value optval points at, read by the bridge
    uint64_t migrate_token;  // MIGRATE_ID: the token of the channel cmd.fd names
    uint8_t command[kMaxCmCommand];
    uint8_t option[kMaxCmOptionValue];
};
// What the kernel would copy_to_user: `response_length` bytes to
// `response_address` in the caller (none on error).
struct CmCommandReply {
    uint64_t response_address;
    uint32_t response_length;
    uint32_t reserved;
    uint8_t response[kMaxCmResponse];
};

struct NetlinkOpenRequest {
    uint32_t reserved;
};
struct NetlinkOpenReply {
    uint32_t port_id;  // the socket's netlink port: getsockname's nl_pid, every reply's nlmsg_pid
    uint32_t reserved;
};

// Request type -> op and reply type.
template <class Request>
struct Traits;
#define UROCE_RPC(OP, REQUEST, REPLY)     \
    template <>                           \
    struct Traits<REQUEST> {              \
        static constexpr Op kOp = Op::OP; \
        using Reply = REPLY;              \
    };
// Requests whose body type is shared (HandleRequest, DeviceRequest) are sent with an
// explicit op; see Client::call.
UROCE_RPC(kHello, HelloRequest, HelloReply)
UROCE_RPC(kAttach, AttachRequest, Empty)
UROCE_RPC(kQueryDevice, QueryDeviceRequest, QueryDeviceReply)
UROCE_RPC(kQueryPort, QueryPortRequest, QueryPortReply)
UROCE_RPC(kRegMr, RegMrRequest, RegMrReply)
UROCE_RPC(kReregMr, ReregMrRequest, ReregMrReply)
UROCE_RPC(kAdviseMr, AdviseMrRequest, Empty)
UROCE_RPC(kAllocMw, AllocMwRequest, AllocMwReply)
UROCE_RPC(kAllocDm, AllocDmRequest, AllocDmReply)
UROCE_RPC(kRegDmMr, RegDmMrRequest, RegMrReply)
UROCE_RPC(kCreateCompChannel, CreateCompChannelRequest, Empty)
UROCE_RPC(kDestroyCompChannel, DestroyCompChannelRequest, Empty)
UROCE_RPC(kCreateCq, CreateCqRequest, CreateCqReply)
UROCE_RPC(kResizeCq, ResizeCqRequest, ResizeCqReply)
UROCE_RPC(kModifyCq, ModifyCqRequest, Empty)
UROCE_RPC(kCreateSrq, CreateSrqRequest, CreateSrqReply)
UROCE_RPC(kModifySrq, ModifySrqRequest, ModifySrqReply)
UROCE_RPC(kCreateQp, CreateQpRequest, CreateQpReply)
UROCE_RPC(kModifyQp, ModifyQpRequest, Empty)
UROCE_RPC(kQueryQp, QueryQpRequest, QueryQpReply)
UROCE_RPC(kCreateWq, CreateWqRequest, CreateWqReply)
UROCE_RPC(kModifyWq, ModifyWqRequest, Empty)
UROCE_RPC(kCreateRwqIndTable, CreateRwqIndTableRequest, CreateRwqIndTableReply)
UROCE_RPC(kOpenQp, OpenQpRequest, OpenQpReply)
UROCE_RPC(kCreateAh, CreateAhRequest, CreateAhReply)
UROCE_RPC(kOpenXrcd, OpenXrcdRequest, OpenXrcdReply)
UROCE_RPC(kCreateFlow, CreateFlowRequest, CreateFlowReply)
UROCE_RPC(kSetFaults, SetFaultsRequest, Empty)
UROCE_RPC(kCoverage, CoverageRequest, CoverageReply)
UROCE_RPC(kStep, StepRequest, StepReply)
UROCE_RPC(kConsoleStart, ConsoleStartRequest, ConsoleStartReply)
UROCE_RPC(kCmOpen, CmOpenRequest, CmOpenReply)
UROCE_RPC(kCmCommand, CmCommandRequest, CmCommandReply)
UROCE_RPC(kCmAttach, CmAttachRequest, Empty)
UROCE_RPC(kNetlinkOpen, NetlinkOpenRequest, NetlinkOpenReply)
UROCE_RPC(kCheckFinding, CheckFindingRequest, Empty)
UROCE_RPC(kCheckPeer, CheckPeerRequest, CheckPeerReply)
#undef UROCE_RPC

}  // namespace uroce::rpc

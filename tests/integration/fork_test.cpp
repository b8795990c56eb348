// A process forked from one that opened a device issues verbs on the
// inherited context, as with a kernel (whose uverbs file the child shares):
// each child gets a connection of its own to the same context, and its MRs
// describe its own memory. rdma-core's test_multi_process_alloc_dm does this.
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <vector>

#include "rc_pair.h"

namespace uroce::test {
namespace {

using ForkTest = RcTest;

// Runs `body` in `count` children at once; each child's exit status is the
// value `body` returns (0 for success). Returns the statuses.
std::vector<int> in_children(int count, const std::function<int(int)>& body) {
    std::vector<pid_t> pids;
    for (int i = 0; i < count; ++i) {
        const pid_t pid = fork();
        if (pid == 0) {
            _exit(body(i));
        }
        pids.push_back(pid);
    }
    std::vector<int> statuses;
    for (pid_t pid : pids) {
        int status = 0;
        waitpid(pid, &status, 0);
        statuses.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    }
    return statuses;
}

// Five children and the parent allocate and free at the same time on one
// context: every call gets its own answer (no reply crosses to another
// process), and what the children created and freed leaves nothing behind.
TEST_F(ForkTest, ChildrenIssueVerbsOnTheInheritedContext) {
    ASSERT_NO_FATAL_FAILURE(connect_pair());
    ibv_context* context = a_.context();
    const auto work = [context](int seed) {
        std::vector<char> memory(4096, static_cast<char>(seed));
        for (int round = 0; round < 50; ++round) {
            ibv_pd* pd = ibv_alloc_pd(context);
            if (!pd) {
                return 1;
            }
            ibv_mr* mr = ibv_reg_mr(pd, memory.data(), memory.size(), IBV_ACCESS_LOCAL_WRITE);
            ibv_alloc_dm_attr dm_attr{4096, 0, 0};
            ibv_dm* dm = ibv_alloc_dm(context, &dm_attr);
            if (!mr || !dm) {
                return 2;
            }
            uint32_t word = static_cast<uint32_t>(seed * 1000 + round), back = 0;
            if (ibv_memcpy_to_dm(dm, 0, &word, 4) || ibv_memcpy_from_dm(&back, dm, 0, 4) ||
                back != word) {
                return 3;
            }
            if (ibv_free_dm(dm) || ibv_dereg_mr(mr) || ibv_dealloc_pd(pd)) {
                return 4;
            }
        }
        return 0;
    };
    const std::vector<int> statuses = in_children(5, [&](int i) { return work(i + 1); });
    EXPECT_EQ(work(0), 0);
    EXPECT_EQ(statuses, std::vector<int>(5, 0));
    // The parent's own objects still answer.
    ibv_qp_attr attr;
    ibv_qp_init_attr init;
    ASSERT_EQ(ibv_query_qp(a_.qp(), &attr, IBV_QP_STATE, &init), 0);
    EXPECT_EQ(attr.qp_state, IBV_QPS_RTS);
}

// A child's MR is over the child's memory, which differs from the parent's
// after the fork: an RDMA WRITE the child posts on the inherited QP carries
// the child's bytes, and the parent sees the completion's effect.
TEST_F(ForkTest, ChildMemoryRegionsDescribeTheChildsMemory) {
    ASSERT_NO_FATAL_FAILURE(connect_pair());
    Buffer& target = b_.buffer(4096, kRemoteAccess, 5);
    std::vector<uint8_t> source(4096, 0x11);  // the parent's copy keeps 0x11
    const uint64_t remote = target.addr();
    const uint32_t rkey = target.rkey();
    const std::vector<int> statuses = in_children(1, [&](int) {
        std::memset(source.data(), 0x77, source.size());  // only the child's copy
        ibv_mr* mr = ibv_reg_mr(a_.pd(), source.data(), source.size(), IBV_ACCESS_LOCAL_WRITE);
        if (!mr) {
            return 1;
        }
        ibv_sge sge{reinterpret_cast<uintptr_t>(source.data()), 4096, mr->lkey};
        ibv_send_wr wr{};
        wr.wr_id = 9;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_RDMA_WRITE;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr.rdma = {remote, rkey};
        ibv_send_wr* bad = nullptr;
        if (ibv_post_send(a_.qp(), &wr, &bad)) {
            return 2;
        }
        ibv_wc wc{};
        int polled = 0;
        for (int spins = 0; spins < 5000000 && polled == 0; ++spins) {
            polled = ibv_poll_cq(a_.cq(), 1, &wc);
        }
        // What a child creates lives in the shared context until freed.
        if (ibv_dereg_mr(mr)) {
            return 5;
        }
        return polled != 1 ? 4 : wc.status == IBV_WC_SUCCESS && wc.wr_id == 9 ? 0 : 3;
    });
    ASSERT_EQ(statuses, std::vector<int>{0});
    EXPECT_TRUE(same_bytes(target.bytes(), std::vector<uint8_t>(4096, 0x77)));
    EXPECT_EQ(source, std::vector<uint8_t>(4096, 0x11));
}

}  // namespace
}  // namespace uroce::test

// The bridge's /dev/infiniband/rdma_cm (rdma_cm_channel.cpp): what the open
// and fstatat interposers of preload.cpp ask of it.
#pragma once

#include <sys/stat.h>

namespace uroce::bridge {

// When `path` is /dev/infiniband/rdma_cm in a uroce environment, opens an
// event channel of the daemon's and returns true with *fd set to it (-1 with
// errno set when that fails). Returns false for every other open.
bool open_cm_channel(const char* path, int flags, int* fd);

// After a successful fstat of `fd`: an event channel describes itself as the
// kernel's misc device does.
void describe_cm_channel(int fd, struct stat* st);
void describe_cm_channel(int fd, struct stat64* st);

}  // namespace uroce::bridge

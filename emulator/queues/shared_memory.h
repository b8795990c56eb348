// Memory the daemon shares with one client: a sealed memfd mapped here and
// handed to the client, who maps it too. Sealing keeps the client from
// shrinking it under the daemon (which would fault the daemon).
#pragma once

#include <stddef.h>

#include <string>

#include "util/result.h"
#include "util/unique_fd.h"

namespace uroce {

class SharedMemory {
  public:
    SharedMemory() = default;
    SharedMemory(SharedMemory&& other) noexcept;
    SharedMemory& operator=(SharedMemory&& other) noexcept;
    SharedMemory(const SharedMemory&) = delete;
    SharedMemory& operator=(const SharedMemory&) = delete;
    ~SharedMemory();

    // Creates `size` zeroed bytes (rounded up to pages). Fails with ENOMEM.
    static Result create(const std::string& name, size_t size, SharedMemory& out);

    void* data() const { return data_; }
    size_t size() const { return size_; }
    int fd() const { return fd_.get(); }
    // Hands the descriptor over (for the client); the mapping stays. A
    // daemon that kept one per queue would run out of descriptors long
    // before max_qp.
    UniqueFd release_fd() { return std::move(fd_); }

  private:
    UniqueFd fd_;
    void* data_ = nullptr;
    size_t size_ = 0;
};

}  // namespace uroce

#include "queues/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <utility>

namespace uroce {

SharedMemory::SharedMemory(SharedMemory&& other) noexcept
    : fd_(std::move(other.fd_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

SharedMemory& SharedMemory::operator=(SharedMemory&& other) noexcept {
    if (this != &other) {
        if (data_) {
            munmap(data_, size_);
        }
        fd_ = std::move(other.fd_);
        data_ = std::exchange(other.data_, nullptr);
        size_ = std::exchange(other.size_, 0);
    }
    return *this;
}

SharedMemory::~SharedMemory() {
    if (data_) {
        munmap(data_, size_);
    }
}

Result SharedMemory::create(const std::string& name, size_t size, SharedMemory& out) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    size = (size + page - 1) / page * page;
    UniqueFd fd(memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING));
    if (!fd || ftruncate(fd.get(), static_cast<off_t>(size)) != 0 ||
        fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        return fail(ENOMEM, "cannot create %zu bytes of shared memory for %s", size, name.c_str());
    }
    void* data = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
    if (data == MAP_FAILED) {
        return fail(ENOMEM, "cannot map %zu bytes of shared memory for %s", size, name.c_str());
    }
    out = SharedMemory();
    out.fd_ = std::move(fd);
    out.data_ = data;
    out.size_ = size;
    return ok();
}

}  // namespace uroce

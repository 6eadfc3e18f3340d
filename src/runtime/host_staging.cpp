// Pinned, mapped host staging for p2p-sami-host (host_staging.h).
#include "runtime/host_staging.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <cuda_runtime.h>

#include "iser/error.h"

namespace iser {

std::unique_ptr<HostStaging> HostStaging::allocate(int64_t bytes) {
  ISER_CHECK(bytes > 0, "host staging: {} bytes", bytes);
  std::unique_ptr<HostStaging> s(new HostStaging());
  ISER_CUDA_CHECK(cudaHostAlloc(&s->host_, static_cast<size_t>(bytes),
                                cudaHostAllocMapped | cudaHostAllocPortable));
  s->cuda_allocated_ = true;
  s->bytes_ = bytes;
  std::memset(s->host_, 0, static_cast<size_t>(bytes));
  void* device = nullptr;
  ISER_CUDA_CHECK(cudaHostGetDevicePointer(&device, s->host_, 0));
  s->device_ = static_cast<char*>(device);
  return s;
}

std::unique_ptr<HostStaging> HostStaging::create_shared(const std::string& label, int64_t bytes) {
  return map_shared(label, bytes, true);
}

std::unique_ptr<HostStaging> HostStaging::open_shared(const std::string& path, int64_t bytes) {
  return map_shared(path, bytes, false);
}

// `name`: the memfd's label (create) or the creator's path (open).
std::unique_ptr<HostStaging> HostStaging::map_shared(const std::string& name, int64_t bytes,
                                                     bool create) {
  ISER_CHECK(bytes > 0, "host staging: {} bytes", bytes);
  std::unique_ptr<HostStaging> s(new HostStaging());
  // NOTE: an anonymous memfd (shmem, not bound by /dev/shm's size, never left behind) that the
  // other ranks open through /proc/<creator pid>/fd/<fd> while the creator keeps it open.
  const int fd = create ? static_cast<int>(::memfd_create(name.c_str(), MFD_CLOEXEC))
                        : ::open(name.c_str(), O_RDWR | O_CLOEXEC);
  ISER_CHECK(fd >= 0, "host staging: {}({}) failed: {}", create ? "memfd_create" : "open", name,
             std::strerror(errno));
  struct stat st {};
  const bool sized =
      create ? ::ftruncate(fd, bytes) == 0 : ::fstat(fd, &st) == 0 && st.st_size == bytes;
  void* host =
      sized ? ::mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
            : MAP_FAILED;
  const int err = errno;
  if (create && host != MAP_FAILED) {
    s->path_ = "/proc/" + std::to_string(::getpid()) + "/fd/" + std::to_string(fd);
    s->fd_ = fd;  // open until close_path(): the other ranks open the path meanwhile
  } else {
    ::close(fd);  // the mapping keeps the memory
  }
  ISER_CHECK(sized, "host staging: {} cannot hold {} bytes: {}", name, bytes, std::strerror(err));
  ISER_CHECK(host != MAP_FAILED, "host staging: mmap({}) failed: {}", name, std::strerror(err));
  s->host_ = host;
  s->bytes_ = bytes;
  ISER_CUDA_CHECK(cudaHostRegister(host, static_cast<size_t>(bytes),
                                   cudaHostRegisterMapped | cudaHostRegisterPortable));
  s->registered_ = true;
  void* device = nullptr;
  ISER_CUDA_CHECK(cudaHostGetDevicePointer(&device, host, 0));
  s->device_ = static_cast<char*>(device);
  return s;
}

void HostStaging::close_path() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  path_.clear();
}

HostStaging::~HostStaging() {
  if (cuda_allocated_) {
    cudaFreeHost(host_);
  } else if (host_ != nullptr) {
    if (registered_) cudaHostUnregister(host_);
    ::munmap(host_, static_cast<size_t>(bytes_));
  }
  close_path();
}

}  // namespace iser

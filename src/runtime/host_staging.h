// Pinned host memory mapped into every rank's address space: the staging of the p2p-sami-host
// transport (layout: cuda/host_lane.h). RAII: the destructor unregisters / frees / unmaps and
// closes the creator's file descriptor.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace iser {

class HostStaging {
 public:
  // One process (logical ranks): cudaHostAlloc(Mapped | Portable), zeroed.
  static std::unique_ptr<HostStaging> allocate(int64_t bytes);
  // One process per GPU, one host: shared memory created here (an anonymous memfd labelled
  // `label`, zero-filled by ftruncate; path() names it for the other ranks while the creator
  // keeps it open, until close_path() or the destructor) or opened from a creator's path(),
  // mapped MAP_SHARED and registered with cudaHostRegister(Mapped | Portable).
  static std::unique_ptr<HostStaging> create_shared(const std::string& label, int64_t bytes);
  static std::unique_ptr<HostStaging> open_shared(const std::string& path, int64_t bytes);

  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;
  ~HostStaging();

  const std::string& path() const { return path_; }  // creator: "/proc/<pid>/fd/<fd>"
  void close_path() noexcept;                        // call once every rank opened path()
  char* device() const { return device_; }           // as mapped on the current device
  int64_t bytes() const { return bytes_; }

 private:
  HostStaging() = default;
  static std::unique_ptr<HostStaging> map_shared(const std::string& name, int64_t bytes,
                                                 bool create);

  void* host_ = nullptr;
  char* device_ = nullptr;
  int64_t bytes_ = 0;
  bool cuda_allocated_ = false;  // cudaHostAlloc (else mmap + cudaHostRegister)
  bool registered_ = false;
  int fd_ = -1;       // creator: the memfd, open until close_path()
  std::string path_;  // creator: how the other ranks open it
};

}  // namespace iser

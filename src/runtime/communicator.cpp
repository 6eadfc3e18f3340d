// NCCL bootstrap (docs/design.md §9): unique id through a private file or the environment, or a
// communicator borrowed from the caller. Nothing listens on a network port beyond NCCL itself.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

#include <cuda_runtime.h>
#include <nccl.h>

#include "iser/error.h"
#include "iser/runtime.h"

namespace iser {
namespace {

std::string to_hex(const ncclUniqueId& id) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(sizeof(id.internal) * 2);
  for (char c : id.internal) {
    const auto byte = static_cast<unsigned char>(c);
    out.push_back(kDigits[byte >> 4]);
    out.push_back(kDigits[byte & 15]);
  }
  return out;
}

ncclUniqueId from_hex(std::string_view hex, const char* what) {
  ncclUniqueId id{};
  ISER_CHECK(hex.size() == sizeof(id.internal) * 2, "{}: NCCL unique id has {} hex digits, want {}",
             what, hex.size(), sizeof(id.internal) * 2);
  auto digit = [&](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    throw Error(fmt::format("{}: NCCL unique id holds non-hex character '{}'", what, c));
  };
  for (size_t i = 0; i < sizeof(id.internal); ++i) {
    id.internal[i] = static_cast<char>(digit(hex[2 * i]) * 16 + digit(hex[2 * i + 1]));
  }
  return id;
}

void check_private(const std::filesystem::path& path, bool is_dir) {
  struct stat st {};
  ISER_CHECK(::stat(path.c_str(), &st) == 0, "bootstrap: cannot stat {}: {}", path.string(),
             std::strerror(errno));
  ISER_CHECK(is_dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode), "bootstrap: {} is not a {}",
             path.string(), is_dir ? "directory" : "regular file");
  ISER_CHECK(st.st_uid == ::geteuid(), "bootstrap: {} is owned by uid {}, not by this user",
             path.string(), st.st_uid);
  ISER_CHECK((st.st_mode & 077) == 0,
             "bootstrap: {} has mode {:o}; group/other must have no access (0700 / 0600)",
             path.string(), st.st_mode & 0777);
}

ncclComm* init_comm(const ncclUniqueId& id, int rank, int num_ranks) {
  ncclComm_t comm = nullptr;
  ISER_NCCL_CHECK(ncclCommInitRank(&comm, num_ranks, id, rank));
  return comm;
}

void check_rank(int rank, int num_ranks) {
  ISER_CHECK(num_ranks >= 1 && rank >= 0 && rank < num_ranks,
             "bootstrap: rank = {} not in [0, num_ranks = {})", rank, num_ranks);
}

}  // namespace

Communicator::Communicator(ncclComm* comm, bool owned) : comm_(comm), owned_(owned) {
  ISER_CHECK(comm != nullptr, "communicator: null NCCL communicator");
  ISER_NCCL_CHECK(ncclCommUserRank(comm, &rank_));
  ISER_NCCL_CHECK(ncclCommCount(comm, &size_));
}

Communicator::Communicator(Communicator&& other) noexcept
    : comm_(other.comm_), owned_(other.owned_), rank_(other.rank_), size_(other.size_) {
  other.comm_ = nullptr;
  other.owned_ = false;
}

Communicator& Communicator::operator=(Communicator&& other) noexcept {
  if (this != &other) {
    if (owned_ && comm_) ncclCommDestroy(comm_);
    comm_ = other.comm_;
    owned_ = other.owned_;
    rank_ = other.rank_;
    size_ = other.size_;
    other.comm_ = nullptr;
    other.owned_ = false;
  }
  return *this;
}

Communicator::~Communicator() {
  if (owned_ && comm_) ncclCommDestroy(comm_);
}

Communicator Communicator::borrow(ncclComm* comm) {
  return Communicator(comm, false);
}

std::string Communicator::new_unique_id_hex() {
  ncclUniqueId id{};
  ISER_NCCL_CHECK(ncclGetUniqueId(&id));
  return to_hex(id);
}

Communicator Communicator::from_env(int rank, int num_ranks, const char* var) {
  check_rank(rank, num_ranks);
  const char* hex = std::getenv(var);
  ISER_CHECK(hex != nullptr, "bootstrap: environment variable {} (NCCL unique id) is not set", var);
  return Communicator(init_comm(from_hex(hex, var), rank, num_ranks), true);
}

Communicator Communicator::from_unique_id_hex(std::string_view hex, int rank, int num_ranks) {
  check_rank(rank, num_ranks);
  return Communicator(init_comm(from_hex(hex, "bootstrap"), rank, num_ranks), true);
}

Communicator Communicator::from_unique_id_file(const std::string& path, int rank, int num_ranks,
                                               int timeout_ms) {
  namespace fs = std::filesystem;
  check_rank(rank, num_ranks);
  const fs::path file(path);
  const fs::path dir = file.has_parent_path() ? file.parent_path() : fs::path(".");
  ncclUniqueId id{};
  bool created_dir = false;
  if (rank == 0) {
    if (!fs::exists(dir)) {
      ISER_CHECK(::mkdir(dir.c_str(), 0700) == 0 || errno == EEXIST,
                 "bootstrap: cannot create {}: {}", dir.string(), std::strerror(errno));
      created_dir = true;
    }
    check_private(dir, true);
    ISER_NCCL_CHECK(ncclGetUniqueId(&id));
    // Write-then-rename: readers never see a partial id.
    const fs::path tmp = file.string() + fmt::format(".tmp{}", ::getpid());
    const int fd = ::open(tmp.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
    ISER_CHECK(fd >= 0, "bootstrap: cannot create {}: {}", tmp.string(), std::strerror(errno));
    const ssize_t written = ::write(fd, id.internal, sizeof(id.internal));
    ::close(fd);
    ISER_CHECK(written == static_cast<ssize_t>(sizeof(id.internal)), "bootstrap: short write to {}",
               tmp.string());
    ISER_CHECK(::rename(tmp.c_str(), file.c_str()) == 0, "bootstrap: cannot rename {} to {}: {}",
               tmp.string(), file.string(), std::strerror(errno));
  } else {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd >= 0) {
        ::close(fd);
        break;
      }
      ISER_CHECK(std::chrono::steady_clock::now() < deadline,
                 "bootstrap: rank {} waited {} ms for the unique id file {} (is rank 0 running?)",
                 rank, timeout_ms, file.string());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    check_private(dir, true);
    check_private(file, false);
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    ISER_CHECK(fd >= 0, "bootstrap: cannot open {}: {}", file.string(), std::strerror(errno));
    const ssize_t got = ::read(fd, id.internal, sizeof(id.internal));
    ::close(fd);
    ISER_CHECK(got == static_cast<ssize_t>(sizeof(id.internal)),
               "bootstrap: {} holds {} bytes, want {}", file.string(), got, sizeof(id.internal));
  }
  ncclComm* comm = init_comm(id, rank, num_ranks);
  // NOTE: ncclCommInitRank returns on rank 0 only after every rank joined, so every rank has
  // read the id: the file can go.
  if (rank == 0) {
    ::unlink(file.c_str());
    if (created_dir) ::rmdir(dir.c_str());
  }
  return Communicator(comm, true);
}

}  // namespace iser

// The peer-memory choice (src/runtime/peer_memory_choice.h): the ISER_PEER_MEMORY override, the
// collective choice between an NCCL window and CUDA IPC, and the multicast preconditions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <string>
#include <vector>

#include "iser/error.h"
#include "runtime/peer_memory_choice.h"

namespace iser::runtime {
namespace {

PeerMemoryProbe probe(PeerMemoryMode request, bool usable, const std::string& reason = "") {
  PeerMemoryProbe p;
  p.request = static_cast<int32_t>(request);
  p.nccl_usable = usable ? 1 : 0;
  set_probe_reason(p, reason);
  return p;
}

std::string error_of(const std::vector<PeerMemoryProbe>& probes) {
  try {
    choose_peer_memory(probes);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Sets an environment variable for one test and restores it afterwards.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (had_) {
      ::setenv(name_, old_.c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

TEST(PeerMemory, NamesRoundTrip) {
  for (PeerMemoryMode m : {PeerMemoryMode::kAuto, PeerMemoryMode::kNccl, PeerMemoryMode::kIpc}) {
    EXPECT_EQ(peer_memory_from_string(to_string(m)), m);
  }
  EXPECT_EQ(to_string(PeerMemoryMode::kLocal), "local");
  EXPECT_THROW(peer_memory_from_string("local"), Error);  // a mode, never a request
  EXPECT_THROW(peer_memory_from_string("NCCL"), Error);
}

TEST(PeerMemory, ConfigurationRefusesLocalAsARequest) {
  RuntimeConfig c;
  c.num_ranks = 2;
  c.num_experts = 4;
  c.num_slots = 1;
  c.bundle = {4096, 0};
  c.validate();
  c.peer_memory = PeerMemoryMode::kLocal;
  try {
    c.validate();
    ADD_FAILURE() << "peer_memory = local accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("peer_memory = 3 is not a request"), std::string::npos)
        << e.what();
  }
}

TEST(PeerMemory, EnvironmentOverridesAutoOnly) {
  EXPECT_EQ(resolve_peer_memory_request(PeerMemoryMode::kAuto, nullptr), PeerMemoryMode::kAuto);
  EXPECT_EQ(resolve_peer_memory_request(PeerMemoryMode::kAuto, ""), PeerMemoryMode::kAuto);
  EXPECT_EQ(resolve_peer_memory_request(PeerMemoryMode::kAuto, "ipc"), PeerMemoryMode::kIpc);
  EXPECT_EQ(resolve_peer_memory_request(PeerMemoryMode::kAuto, "nccl"), PeerMemoryMode::kNccl);
  // An explicit configuration wins over the environment.
  EXPECT_EQ(resolve_peer_memory_request(PeerMemoryMode::kNccl, "ipc"), PeerMemoryMode::kNccl);
  EXPECT_EQ(resolve_peer_memory_request(PeerMemoryMode::kIpc, "nccl"), PeerMemoryMode::kIpc);
  try {
    resolve_peer_memory_request(PeerMemoryMode::kAuto, "nvshmem");
    ADD_FAILURE() << "bad value accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ISER_PEER_MEMORY=nvshmem"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(resolve_peer_memory_request(PeerMemoryMode::kLocal, nullptr), Error);
}

TEST(PeerMemory, NcclWhenEveryRankCan) {
  const std::vector<PeerMemoryProbe> probes(4, probe(PeerMemoryMode::kAuto, true));
  const PeerMemoryChoice c = choose_peer_memory(probes);
  EXPECT_EQ(c.mode, PeerMemoryMode::kNccl);
  EXPECT_NE(c.reason.find("NCCL symmetric window"), std::string::npos) << c.reason;
}

TEST(PeerMemory, AutoFallsBackToIpcNamingTheRank) {
  std::vector<PeerMemoryProbe> probes(4, probe(PeerMemoryMode::kAuto, true));
  probes[2] = probe(PeerMemoryMode::kAuto, false, "the LSA team holds 2 of the 4 ranks");
  probes[3] = probe(PeerMemoryMode::kAuto, false, "another reason");
  const PeerMemoryChoice c = choose_peer_memory(probes);
  EXPECT_EQ(c.mode, PeerMemoryMode::kIpc);
  EXPECT_NE(c.reason.find("rank 2"), std::string::npos) << c.reason;
  EXPECT_NE(c.reason.find("LSA team holds 2 of the 4"), std::string::npos) << c.reason;
}

TEST(PeerMemory, NcclAskedButUnusableIsRefused) {
  std::vector<PeerMemoryProbe> probes(3, probe(PeerMemoryMode::kNccl, true));
  probes[1] = probe(PeerMemoryMode::kNccl, false, "ncclMemAlloc failed");
  const std::string e = error_of(probes);
  EXPECT_NE(e.find("rank 1"), std::string::npos) << e;
  EXPECT_NE(e.find("ncclMemAlloc failed"), std::string::npos) << e;
  probes[1].nccl_usable = 1;
  EXPECT_EQ(choose_peer_memory(probes).mode, PeerMemoryMode::kNccl);
}

TEST(PeerMemory, IpcAskedIgnoresNcclUsability) {
  const std::vector<PeerMemoryProbe> probes(2, probe(PeerMemoryMode::kIpc, true));
  const PeerMemoryChoice c = choose_peer_memory(probes);
  EXPECT_EQ(c.mode, PeerMemoryMode::kIpc);
  EXPECT_NE(c.reason.find("as asked"), std::string::npos) << c.reason;
}

TEST(PeerMemory, RanksMustAskForTheSame) {
  std::vector<PeerMemoryProbe> probes(3, probe(PeerMemoryMode::kAuto, true));
  probes[2] = probe(PeerMemoryMode::kIpc, true);
  const std::string e = error_of(probes);
  EXPECT_NE(e.find("rank 2 asks for peer memory 'ipc' but rank 0 for 'auto'"), std::string::npos)
      << e;
  EXPECT_THROW(common_peer_memory_request(probes), Error);
  probes[2] = probe(PeerMemoryMode::kAuto, true);
  EXPECT_EQ(common_peer_memory_request(probes), PeerMemoryMode::kAuto);
}

TEST(PeerMemory, ARankThatRejectedItsRequestIsNamed) {
  std::vector<PeerMemoryProbe> probes(2, probe(PeerMemoryMode::kAuto, true));
  probes[1].request = -1;
  set_probe_reason(probes[1], "ISER_PEER_MEMORY=bogus: not a peer memory mode");
  const std::string e = error_of(probes);
  EXPECT_NE(e.find("rank 1 rejected"), std::string::npos) << e;
  EXPECT_NE(e.find("ISER_PEER_MEMORY=bogus"), std::string::npos) << e;
  EXPECT_THROW(choose_peer_memory({}), Error);
}

TEST(PeerMemory, ProbeReasonIsTruncatedAndTerminated) {
  PeerMemoryProbe p;
  set_probe_reason(p, std::string(1000, 'x'));
  EXPECT_EQ(probe_reason(p).size(), sizeof(p.reason) - 1);
  // A reason without a terminator (another process's bytes) is read within the array only.
  std::fill(std::begin(p.reason), std::end(p.reason), 'y');
  EXPECT_EQ(probe_reason(p).size(), sizeof(p.reason));
}

TEST(PeerMemory, MulticastBlockedByNvlsEnvFirst) {
  {
    const ScopedEnv nvls("NCCL_NVLS_ENABLE", "0");
    for (bool opted : {false, true}) {
      for (PeerMemoryMode m : {PeerMemoryMode::kNccl, PeerMemoryMode::kIpc}) {
        const std::string r = multicast_blocker(opted, m);
        EXPECT_NE(r.find("NCCL_NVLS_ENABLE=0"), std::string::npos) << r;
      }
    }
  }
  {
    const ScopedEnv nvls("NCCL_NVLS_ENABLE", "1");
    EXPECT_NE(multicast_blocker(false, PeerMemoryMode::kNccl).find("not asked for"),
              std::string::npos);
    EXPECT_NE(multicast_blocker(true, PeerMemoryMode::kIpc).find("needs NCCL peer memory"),
              std::string::npos);
    EXPECT_NE(multicast_blocker(true, PeerMemoryMode::kLocal).find("'local'"), std::string::npos);
    // Nothing blocks: only then may NCCL be asked whether it supports multimem.
    EXPECT_EQ(multicast_blocker(true, PeerMemoryMode::kNccl), "");
  }
}

TEST(PeerMemory, DescribeLine) {
  EXPECT_EQ(describe_peer_memory(PeerMemoryMode::kIpc, "CUDA IPC handles, as asked", false,
                                 "not asked for"),
            "peer memory: ipc (CUDA IPC handles, as asked); multicast unavailable: not asked for");
  EXPECT_EQ(describe_peer_memory(PeerMemoryMode::kNccl, "x", true, ""),
            "peer memory: nccl (x); multicast available");
}

}  // namespace
}  // namespace iser::runtime

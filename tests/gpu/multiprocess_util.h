// Multi-process GPU tests: a test re-executes this binary once per rank (same --gtest_filter,
// rank in ISER_MP_RANK) with a file-based NCCL unique id in a private directory; the parent waits
// for every rank and fails on any non-zero exit or a timeout. Usage, first line of a test body:
//   ISER_AS_RANKS(2, 240);   // then `env->rank`, `env->world`, `env->id_file` in the rank
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "runtime_test_util.h"

extern char** environ;

namespace iser::testing {

struct RankEnv {
  int rank = 0;
  int world = 0;
  std::string id_file;
};

inline std::optional<RankEnv> child_env() {
  const char* rank = std::getenv("ISER_MP_RANK");
  const char* world = std::getenv("ISER_MP_WORLD");
  const char* file = std::getenv("ISER_MP_ID_FILE");
  if (!rank || !world || !file) return std::nullopt;
  return RankEnv{std::atoi(rank), std::atoi(world), file};
}

inline void run_as_ranks(int world, int timeout_s) {
  char dir_template[] = "/tmp/iser-mp-XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);  // mode 0700
  const std::string id_file = std::string(dir_template) + "/nccl-unique-id";
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string filter =
      std::string("--gtest_filter=") + info->test_suite_name() + "." + info->name();
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> env_strings;
    for (char** e = environ; *e; ++e) {
      if (std::string_view(*e).starts_with("ISER_MP_")) continue;
      env_strings.emplace_back(*e);
    }
    env_strings.push_back("ISER_MP_RANK=" + std::to_string(r));
    env_strings.push_back("ISER_MP_WORLD=" + std::to_string(world));
    env_strings.push_back("ISER_MP_ID_FILE=" + id_file);
    std::vector<char*> envp;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::string exe = "/proc/self/exe";
    std::string arg_filter = filter;
    char* argv[] = {exe.data(), arg_filter.data(), nullptr};
    pid_t pid = 0;
    ASSERT_EQ(::posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, envp.data()), 0);
    pids.push_back(pid);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  std::vector<int> status(world, -1);
  std::vector<bool> done(world, false);
  int remaining = world;
  while (remaining > 0) {
    for (int r = 0; r < world; ++r) {
      if (done[r]) continue;
      int st = 0;
      if (::waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        done[r] = true;
        status[r] = st;
        --remaining;
      }
    }
    if (remaining > 0 && std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < world; ++r) {
        if (!done[r]) {
          ::kill(pids[r], SIGKILL);
          ::waitpid(pids[r], &status[r], 0);
          ADD_FAILURE() << "rank " << r << " timed out after " << timeout_s << " s";
          done[r] = true;
        }
      }
      remaining = 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (int r = 0; r < world; ++r) {
    EXPECT_TRUE(WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 0)
        << "rank " << r << " failed (wait status " << status[r] << ")";
  }
  ::unlink(id_file.c_str());
  ::rmdir(dir_template);
}

// Runs the body in each rank process; in the parent, launches the ranks.
#define ISER_AS_RANKS(world, timeout_s)           \
  ISER_REQUIRE_GPUS(world);                       \
  const std::optional<RankEnv> env = child_env(); \
  if (!env) {                                     \
    run_as_ranks(world, timeout_s);               \
    return;                                       \
  }                                               \
  ISER_EXPECT_CUDA(cudaSetDevice(env->rank))

}  // namespace iser::testing

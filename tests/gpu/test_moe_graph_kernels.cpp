// Kernels of the EP layer's graph mode on one GPU (src/cuda/moe_graph_kernels.h), P ranks
// simulated with one buffer set each: dispatch -> send gather -> block exchange (device copies)
// -> receive maps -> scatter into slots puts every route's row into its slot, sources in rank
// order and each source's routes in (token, j) order (the eager layer's expert order); the
// gather back and the returned exchange bring every row to the route_row the combine reads.
// Rows carry their (source, token) in their bits. Covers the rewrite's slots, OFF (home slots)
// and a refused copy list (helper routes go home).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "cuda/device_buffer.h"
#include "cuda/moe_graph_kernels.h"
#include "runtime_test_util.h"

namespace iser::moe {

using cuda::DeviceBuffer;
namespace {

enum class SlotSource { kRewrite, kHome, kRefusedList };

// The slot route i of a source goes to, as the dispatch kernel defines it.
int model_slot(const GraphDims& d, int32_t expert, int32_t rewritten, SlotSource source) {
  if (expert < 0) return -1;
  const int home = (expert / d.experts_per_rank) * d.slots_per_rank + expert % d.experts_per_rank;
  if (source == SlotSource::kHome) return home;
  if (source == SlotSource::kRefusedList && rewritten % d.slots_per_rank >= d.experts_per_rank) {
    return home;
  }
  return rewritten;
}

void run_case(SlotSource source, uint64_t seed) {
  GraphDims d;
  d.num_ranks = 4;
  d.experts_per_rank = 4;
  d.slots_per_rank = 6;  // S = 2
  d.num_tokens = 16;
  d.top_k = 3;
  d.hidden = 16;
  d.peer_rows = d.num_tokens * d.top_k;
  d.header_rows = 1;  // 24 header bytes in a 32-byte row
  d.slot_rows = d.num_tokens * d.num_ranks;
  const int num_experts = d.num_ranks * d.experts_per_rank;
  const int routes = d.num_tokens * d.top_k;
  const size_t route_bytes = sizeof(int32_t) * routes;
  const int he = d.hidden;
  std::mt19937 rng(static_cast<uint32_t>(seed));

  // Per source: distinct ids per token (some -1); rewritten slots: home, or any helper slot.
  std::vector<std::vector<int32_t>> ids(d.num_ranks), slots(d.num_ranks);
  for (int s = 0; s < d.num_ranks; ++s) {
    for (int t = 0; t < d.num_tokens; ++t) {
      std::vector<int32_t> chosen;
      while (static_cast<int>(chosen.size()) < d.top_k) {
        const int e = static_cast<int>(rng() % num_experts);
        if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
      }
      for (int j = 0; j < d.top_k; ++j) {
        const int32_t e = (rng() % 11 == 0) ? -1 : chosen[j];
        ids[s].push_back(e);
        const int home = (e / d.experts_per_rank) * d.slots_per_rank + e % d.experts_per_rank;
        const int helper = static_cast<int>(rng() % d.num_ranks) * d.slots_per_rank +
                           d.experts_per_rank + static_cast<int>(rng() % 2);
        slots[s].push_back(e < 0 ? -1 : (rng() % 2 == 0 ? home : helper));
      }
    }
  }

  const size_t row_bytes = static_cast<size_t>(he) * 2;
  struct Rank {
    DeviceBuffer input, send, recv, x, y_back, comb, ids, slots, num_ops, send_token, route_row,
        recv_row, expert_row;
  };
  DeviceBuffer error_word(sizeof(uint32_t));
  ISER_CUDA_CHECK(cudaMemset(error_word.get(), 0, sizeof(uint32_t)));
  std::vector<Rank> ranks(d.num_ranks);
  for (int s = 0; s < d.num_ranks; ++s) {
    Rank& r = ranks[s];
    r.input = DeviceBuffer(d.num_tokens * row_bytes);
    std::vector<uint16_t> rows(static_cast<size_t>(d.num_tokens) * he);
    for (int t = 0; t < d.num_tokens; ++t) {
      for (int c = 0; c < he; ++c) rows[t * he + c] = static_cast<uint16_t>(s * 1000 + t);
    }
    ISER_CUDA_CHECK(
        cudaMemcpy(r.input.get(), rows.data(), r.input.bytes(), cudaMemcpyHostToDevice));
    r.send = DeviceBuffer(d.exchange_rows() * row_bytes);
    r.recv = DeviceBuffer(d.exchange_rows() * row_bytes);
    r.x = DeviceBuffer(d.expert_rows() * row_bytes);
    ISER_CUDA_CHECK(cudaMemset(r.x.get(), 0xff, r.x.bytes()));
    r.y_back = DeviceBuffer(d.return_rows() * row_bytes);
    r.comb = DeviceBuffer(d.return_rows() * row_bytes);
    r.ids = DeviceBuffer(route_bytes);
    r.slots = DeviceBuffer(route_bytes);
    ISER_CUDA_CHECK(cudaMemcpy(r.ids.get(), ids[s].data(), route_bytes, cudaMemcpyHostToDevice));
    ISER_CUDA_CHECK(
        cudaMemcpy(r.slots.get(), slots[s].data(), route_bytes, cudaMemcpyHostToDevice));
    r.num_ops = DeviceBuffer(4);
    const int32_t num_ops = source == SlotSource::kRefusedList ? -1 : 3;
    ISER_CUDA_CHECK(cudaMemcpy(r.num_ops.get(), &num_ops, 4, cudaMemcpyHostToDevice));
    r.send_token = DeviceBuffer(d.exchange_rows() * 4);
    r.route_row = DeviceBuffer(route_bytes);
    r.recv_row = DeviceBuffer(d.return_rows() * 4);
    r.expert_row = DeviceBuffer(d.return_rows() * 4);
    cuda::GraphDispatchParams p;
    p.dims = d;
    p.topk_ids = r.ids.get<int32_t>();
    p.slot_ids = source == SlotSource::kHome ? nullptr : r.slots.get<int32_t>();
    p.num_ops = r.num_ops.get<int32_t>();
    p.send = r.send.get<uint16_t>();
    p.send_token = r.send_token.get<int32_t>();
    p.route_row = r.route_row.get<int32_t>();
    p.error_word = error_word.get<uint32_t>();
    cuda::launch_graph_dispatch(p, nullptr);
    cuda::launch_map_rows({r.input.get<uint16_t>(), r.send.get<uint16_t>(),
                           r.send_token.get<int32_t>(), nullptr, d.exchange_rows(), he},
                          nullptr);
  }
  const size_t block_bytes = d.block_rows() * row_bytes;
  for (int s = 0; s < d.num_ranks; ++s) {  // the dispatch exchange: block d of s -> block s of d
    for (int dst = 0; dst < d.num_ranks; ++dst) {
      ISER_CUDA_CHECK(cudaMemcpy(ranks[dst].recv.get<char>() + s * block_bytes,
                                 ranks[s].send.get<char>() + dst * block_bytes, block_bytes,
                                 cudaMemcpyDeviceToDevice));
    }
  }
  for (Rank& r : ranks) {
    cuda::GraphReceiveParams p;
    p.dims = d;
    p.recv = r.recv.get<uint16_t>();
    p.recv_row = r.recv_row.get<int32_t>();
    p.expert_row = r.expert_row.get<int32_t>();
    p.error_word = error_word.get<uint32_t>();
    cuda::launch_graph_receive(p, nullptr);
    cuda::launch_map_rows({r.recv.get<uint16_t>(), r.x.get<uint16_t>(), r.recv_row.get<int32_t>(),
                           r.expert_row.get<int32_t>(), d.return_rows(), he},
                          nullptr);
    // "Expert compute" = identity: the rows go back as they came.
    cuda::launch_map_rows({r.x.get<uint16_t>(), r.y_back.get<uint16_t>(),
                           r.expert_row.get<int32_t>(), nullptr, d.return_rows(), he},
                          nullptr);
  }
  const size_t peer_bytes = d.peer_rows * row_bytes;
  for (int s = 0; s < d.num_ranks; ++s) {  // the return exchange
    for (int dst = 0; dst < d.num_ranks; ++dst) {
      ISER_CUDA_CHECK(cudaMemcpy(ranks[s].comb.get<char>() + dst * peer_bytes,
                                 ranks[dst].y_back.get<char>() + s * peer_bytes, peer_bytes,
                                 cudaMemcpyDeviceToDevice));
    }
  }
  ISER_CUDA_CHECK(cudaDeviceSynchronize());
  uint32_t errors = 0;
  ISER_CUDA_CHECK(cudaMemcpy(&errors, error_word.get(), 4, cudaMemcpyDeviceToHost));
  EXPECT_EQ(errors, 0u);

  // Slot contents: per destination and slot, sources ascending, routes in order.
  for (int dst = 0; dst < d.num_ranks; ++dst) {
    std::vector<uint16_t> x(d.expert_rows() * he);
    ISER_CUDA_CHECK(cudaMemcpy(x.data(), ranks[dst].x.get(), x.size() * 2, cudaMemcpyDeviceToHost));
    for (int l = 0; l < d.slots_per_rank; ++l) {
      std::vector<uint16_t> want;
      for (int s = 0; s < d.num_ranks; ++s) {
        for (int i = 0; i < routes; ++i) {
          if (model_slot(d, ids[s][i], slots[s][i], source) == dst * d.slots_per_rank + l) {
            want.push_back(static_cast<uint16_t>(s * 1000 + i / d.top_k));
          }
        }
      }
      ASSERT_LE(static_cast<int>(want.size()), d.slot_rows);
      for (int c = 0; c < d.slot_rows; ++c) {
        const uint16_t expect = c < static_cast<int>(want.size()) ? want[c] : 0xffff;
        for (int col = 0; col < he; ++col) {
          ASSERT_EQ(x[(static_cast<size_t>(l) * d.slot_rows + c) * he + col], expect)
              << "destination " << dst << " slot " << l << " row " << c;
        }
      }
    }
  }
  // Every route's returned row is its token's row.
  for (int s = 0; s < d.num_ranks; ++s) {
    std::vector<int32_t> route_row(routes);
    std::vector<uint16_t> comb(d.return_rows() * he);
    ISER_CUDA_CHECK(cudaMemcpy(route_row.data(), ranks[s].route_row.get(), route_bytes,
                               cudaMemcpyDeviceToHost));
    ISER_CUDA_CHECK(
        cudaMemcpy(comb.data(), ranks[s].comb.get(), comb.size() * 2, cudaMemcpyDeviceToHost));
    for (int i = 0; i < routes; ++i) {
      if (ids[s][i] < 0) {
        EXPECT_EQ(route_row[i], -1);
        continue;
      }
      ASSERT_GE(route_row[i], 0);
      ASSERT_LT(route_row[i], d.return_rows());
      EXPECT_EQ(comb[static_cast<size_t>(route_row[i]) * he], s * 1000 + i / d.top_k)
          << "source " << s << " route " << i;
    }
  }
}

TEST(MoeGraphKernels, RewrittenSlotsRoundTrip) {
  ISER_REQUIRE_GPUS(1);
  for (uint64_t seed = 1; seed <= 3; ++seed) run_case(SlotSource::kRewrite, seed);
}

TEST(MoeGraphKernels, HomeSlotsRoundTrip) {
  ISER_REQUIRE_GPUS(1);
  run_case(SlotSource::kHome, 7);
}

TEST(MoeGraphKernels, RefusedCopyListSendsHelperRoutesHome) {
  ISER_REQUIRE_GPUS(1);
  run_case(SlotSource::kRefusedList, 11);
}

}  // namespace
}  // namespace iser::moe

// Stage 4 of the planner kernel, scheduled path (plan_repair.cuh has the map of stage 4): the
// level passes and the entry point, repair_scheduled (one warp, out of line).
//
// Levels (P > kPhaseStepMaxRanks): a listed pair of round 1 and its repeat in round 2 are two
// nodes; a node's level is 1 + the larger level of its two ranks' previous listed nodes in the
// CPU's phase order (0 for none), i.e. the length of the longest chain of trades that share a
// rank and end at it. Two passes compute them:
//   nodes     (listed pairs <= kMaxLevelNodes, the common case; all side warps) every side
//             thread owns one listed pair (numbered by build_pair_lists), finds its two nodes'
//             predecessors once (the ranks' listed rotations in list_bits, the node numbers in
//             rank_code), then the threads iterate level = 1 + max(predecessor levels) until no
//             level changes, a barrier per iteration: one per level of the deepest chain, plus
//             one;
//   rotations (otherwise) walks the rotations with a listed pair one by one, both rounds.
// On the bench inputs (H200) the rotation walk took 4.4 us at EP32 (~47 rotations)
// and 9.2 us at EP64 (~85) for chains 10-15 deep.
// NOTE: why the node pass gives the rotation walk's levels: a predecessor is an earlier node
// (earlier rotation of the same round, or round 1 from round 2), so the levels of the DAG's
// longest paths are the unique fixed point; starting from 1 (<= every level), iteration k leaves
// every node at min(its level, k + 2), so the first iteration that changes nothing has them all.
// The iteration reads one buffer and writes the other (Jacobi), so racecheck stays clean.
#pragma once

#include "cuda/plan_repair.cuh"

namespace iser::cuda::plan_detail {

// The rotation walk (one warp), in registers: lane l holds the level of ranks l, l + 32, l + 64 (J
// of them) and walks the rotations with a listed pair in the CPU's phase order, both rounds
// (`rotations`, num_rotations of them, twice). In a rotation the two ranks of a listed pair both
// move to 1 + max(their levels), the lane reading the partner's level from the partner's lane with
// a shuffle; the receiver records level_table[level][a] = the pair's head (a pair's ranks are in no
// other pair of its level). Returns the deepest level (the same on every lane). NOTE: a rotation's
// inputs are three dependent shared loads (its index, its rank codes, the head), so they are
// software-pipelined over three steps: at step i the loop loads the index of step i + 3, the codes
// of step i + 2 and the heads of step i + 1, all independent of each other and of step i's levels;
// the dependent chain of a step is one shuffle and three integer ops.
template <int J>
__device__ __forceinline__ int level_pairs(const RepairView& st, const int32_t* rotations,
                                           int num_rotations, int num_pairs, int lane) {
  const int P = st.P;
  const int num_steps = 2 * num_rotations;
  // rotations[] index after i, cyclic: the second round repeats the first.
  auto next_index = [&](int i) { return i + 1 == num_rotations ? 0 : i + 1; };
  auto load_codes = [&](int row, int(&c)[J]) {
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const int r = lane + 32 * j;
      c[j] = r < P ? st.rank_code[row * P + r] : r;  // lanes past P: never listed
    }
  };
  auto load_heads = [&](int row, const int(&c)[J], int(&h)[J]) {
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const bool records = (c[j] & RankCode::kListed) != 0 && (c[j] & RankCode::kReceiver) != 0;
      h[j] = records ? st.pair_head[row * num_pairs + RankCode::pair(c[j])] : 0;
    }
  };
  int level[J];
#pragma unroll
  for (int j = 0; j < J; ++j) level[j] = 0;
  if (num_steps == 0) return 0;
  // Prologue: step 0's codes and heads, step 1's row and codes, step 2's row.
  int index = 0;  // of the row loaded last, in rotations[]
  int row0 = rotations[index];
  index = next_index(index);
  int row1 = rotations[index];
  index = next_index(index);
  int row2 = rotations[index];
  int code0[J], code1[J], head0[J];
  load_codes(row0, code0);
  load_codes(row1, code1);
  load_heads(row0, code0, head0);
#pragma unroll 1
  for (int step = 0; step < num_steps; ++step) {
    // Loads for later steps first: none of them waits for this step.
    index = next_index(index);
    const int row3 = rotations[index];
    int code2[J], head1[J];
    load_codes(row2, code2);
    load_heads(row1, code1, head1);
    int seen[J];  // the partner's level before this rotation
#pragma unroll
    for (int j = 0; j < J; ++j) seen[j] = 0;
#pragma unroll
    for (int src = 0; src < J; ++src) {
#pragma unroll
      for (int j = 0; j < J; ++j) {
        const int partner = code0[j] & 0xff;
        const int v = __shfl_sync(PlanConfig::kFullMask, level[src], partner & 31);
        seen[j] = J == 1 || (partner >> 5) == src ? v : seen[j];
      }
    }
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const bool listed = (code0[j] & RankCode::kListed) != 0;
      level[j] = listed ? max(level[j], seen[j]) + 1 : level[j];
      if (head0[j] != 0) st.level_table[level[j] * P + lane + 32 * j] = head0[j];
      code0[j] = code1[j];
      code1[j] = code2[j];
      head0[j] = head1[j];
    }
    row1 = row2;
    row2 = row3;
  }
  int deepest = 0;
#pragma unroll
  for (int j = 0; j < J; ++j) deepest = max(deepest, level[j]);
  return __reduce_max_sync(PlanConfig::kFullMask, deepest);
}

// The last rotation below `rot` in which a rank's pair is listed (its list_bits, three words),
// -1 for none.
__device__ __forceinline__ int last_listed_below(const uint32_t* bits, int rot) {
  int last = -1;
#pragma unroll
  for (int j = 0; j < 3; ++j) {
    const int low = 32 * j;
    const unsigned keep = rot <= low        ? 0u
                          : rot >= low + 32 ? 0xffffffffu
                                            : (1u << (rot - low)) - 1u;
    const unsigned m = bits[j] & keep;
    last = m != 0 ? low + 31 - __clz(static_cast<int>(m)) : last;
  }
  return last;
}

// The node pass, on the side threads (thread t of num_threads; every one of them calls it):
// thread t owns listed pair t (kNodeCountWord <= min(kMaxLevelNodes, num_threads) of them: the
// caller checks), i.e. its nodes t and num_nodes + t. Writes level_table[level][a] = the pair's
// head for both nodes (receiver a) and the deepest level to kDeepestWord (zeroed in stage 1); the
// caller's barrier publishes them. Only the warps that own nodes iterate (named barrier 3).
// NOTE: one node pair per thread keeps the code short: after the L2 flush every instruction
// line comes from HBM the first time, and a one-warp version (eight unrolled node slots per lane)
// took 7.1 us at EP32 against 2.4 us for this one (H200).
__device__ __forceinline__ void level_pass_parallel(const State& st, int t, int num_threads) {
  const int P = st.P;
  const int ring_size = P + (P & 1) - 1;
  const int num_nodes = st.scalars[kNodeCountWord];
  const int num_iterating = (num_nodes + 31) & ~31;
  if (t >= num_iterating) return;
  const bool mine = t < num_nodes;
  // Byte n of a buffer is node n's level; byte kNone stays 0 and stands for "no predecessor".
  constexpr int kNone = 2 * kMaxLevelNodes;
  static_assert(kNone < kLevelBufferBytes, "a buffer holds both rounds and the kNone byte");
  uint8_t* const buffer0 = st.level_bytes;
  uint8_t* const buffer1 = st.level_bytes + kLevelBufferBytes;
  // Predecessors of node t (by a, by d) and of node num_nodes + t.
  int pred[4] = {kNone, kNone, kNone, kNone};
  const NodeCode node = {mine ? st.level_nodes[t] : 0};
  if (mine) {
    const int rot = node.rot();
    const int ranks[2] = {node.a(), node.d()};
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int r = ranks[k];
      const uint32_t* bits = st.list_bits + 3 * r;
      const int before = last_listed_below(bits, rot);
      // Round 2 without an earlier listed rotation follows r's last one of round 1 (this one
      // at the latest).
      const int from = before >= 0 ? before : last_listed_below(bits, ring_size);
      const int m = RankCode::node(st.rank_code[from * P + r]);
      pred[k] = before >= 0 ? m : kNone;
      pred[2 + k] = before >= 0 ? num_nodes + m : m;
    }
    buffer0[t] = 1;
    buffer0[num_nodes + t] = 1;
  }
  if (t == 0) {
    buffer0[kNone] = 0;
    buffer1[kNone] = 0;
  }
  named_barrier(3, num_iterating);
  int level1 = 1;
  int level2 = 1;
  // Levels are at most 2 * ring_size; the bound only guards the loop.
#pragma unroll 1
  for (int it = 0; it <= 2 * ring_size; ++it) {
    const uint8_t* src = (it & 1) == 0 ? buffer0 : buffer1;
    uint8_t* dst = (it & 1) == 0 ? buffer1 : buffer0;
    const int next1 = 1 + max(src[pred[0]], src[pred[1]]);
    const int next2 = 1 + max(src[pred[2]], src[pred[3]]);
    const bool changed = next1 != level1 || next2 != level2;
    level1 = next1;
    level2 = next2;
    if (mine) {
      dst[t] = static_cast<uint8_t>(next1);
      dst[num_nodes + t] = static_cast<uint8_t>(next2);
    }
    if (!named_barrier_or(3, num_iterating, changed)) break;
  }
  // A round-2 node follows its own round-1 node on rank a, so level2 > level1.
  const int deepest = __reduce_max_sync(PlanConfig::kFullMask, mine ? level2 : 0);
  if ((t & 31) == 0 && deepest > 0) atomicMax(&st.scalars[kDeepestWord], deepest);
  if (mine) {
    const int head = st.pair_head[node.rot() * ((ring_size + 1) / 2) + node.w()];
    st.level_table[level1 * P + node.a()] = head;
    st.level_table[level2 * P + node.a()] = head;
  }
}

// Stage 4, scheduled path (one warp): levels (P > kPhaseStepMaxRanks; deepest_known >= 0: the
// node pass has written them, otherwise the rotation walk), then trades. Out of line (its own
// register allocation, apart from the kernel body's); the arrays come as shared-memory word
// offsets (RepairView). levels_stamp (optional, profiling) gets the globaltimer after the levels.
inline __device__ __noinline__ void repair_scheduled(int P, int entry_at, int pair_head_at,
                                                     int rank_code_at, int rotations_at,
                                                     int pair_items_at, int level_table_at,
                                                     int scalars_at, int deepest_known, int lane,
                                                     unsigned long long* levels_stamp) {
  extern __shared__ int32_t smem[];
  const RepairView view{P,
                        reinterpret_cast<int2*>(smem + entry_at),
                        smem + pair_head_at,
                        smem + rank_code_at,
                        smem + rotations_at,
                        smem + pair_items_at,
                        smem + level_table_at,
                        smem + scalars_at};
  const int active = list_rotations(view.scalars, view.rotations, lane);
  const int num_pairs = (P + (P & 1)) / 2;
  if (active == 0 || P <= kPhaseStepMaxRanks) {  // num_pairs <= 32: one slot per lane
    if (levels_stamp != nullptr) *levels_stamp = global_timer();
    if (active > 0)
      trade_steps<1>(view, PhaseRows{view.pair_head, num_pairs, view.rotations, active}, 2 * active,
                     lane);
    return;
  }
  const int deepest = deepest_known >= 0 ? deepest_known
                      : P <= 32 ? level_pairs<1>(view, view.rotations, active, num_pairs, lane)
                      : P <= 64 ? level_pairs<2>(view, view.rotations, active, num_pairs, lane)
                                : level_pairs<3>(view, view.rotations, active, num_pairs, lane);
  if (levels_stamp != nullptr) *levels_stamp = global_timer();
  if (P <= 32) {
    trade_steps<1>(view, LevelRows{view.level_table, P}, deepest, lane);
  } else if (P <= 64) {
    trade_steps<2>(view, LevelRows{view.level_table, P}, deepest, lane);
  } else {
    trade_steps<3>(view, LevelRows{view.level_table, P}, deepest, lane);
  }
}

}  // namespace iser::cuda::plan_detail

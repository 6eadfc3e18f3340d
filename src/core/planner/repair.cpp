// HALO-Q stage 4: quota repair (docs/design.md §4.4).
//
// Interpretations of docs/design.md §4.4:
//  - "Order broadcasts by expert id": ties (an expert broadcast twice, which HALO-Q never does
//    but other plans may) keep plan order. Pulls and gives are filled in that order.
//  - Circle method with n seats, n = P for even P and P + 1 for odd P (seat P is the bye: a pair
//    that meets it is skipped). ring = [1 .. n−1]; a phase pairs (0, ring[0]) and
//    (ring[w], ring[n−1−w]) for w = 1 .. n/2 − 1, in that order, then rotates the ring right by
//    one (its last element moves to the front). 2 rounds × (n − 1) phases; the ring keeps
//    rotating across rounds (after n − 1 rotations it is back at its start, so round 2 meets the
//    same pairs in the same order as round 1, on the quotas round 1 left).
//  - A pair (a, d) runs receiver a / donor d, then receiver d / donor a. Pairs of a phase are
//    disjoint, so running them in sequence equals running them in parallel (the GPU may).
//  - c = the receiver's or donor's own routes of the broadcast's expert (c[r][e_b]). With an
//    expert broadcast twice the same own routes count for both broadcasts; trades still keep
//    every load, quota sum and sign, so plans stay valid (only locality is approximate there).
#include <algorithm>

#include "iser/planner.h"

namespace iser {
namespace {

// NOTE: repair works on per-rank copies of (own routes, quota) laid out like the host lists, so
// a trade touches two short contiguous arrays; quotas are written back to the plan at the end.
// spare[r] = entries of rank r with quota > own routes: a trade with receiver a and donor d can
// move something only if both have one (a gives from its spare, d's spare is what a pulls).
struct RepairState {
  int32_t* own;          // [Σ hosts] c[r][e_b] per host entry
  int32_t* quota;        // [Σ hosts] q_b[r] per host entry
  int32_t* spare;        // [P]
  int32_t* pair_a;       // [B] entries of a shared with d
  int32_t* pair_d;       // [B]
  const uint64_t* bits;  // [P * words] hosted broadcasts (positions in ws.order) per rank
  int words;
};

void update_spare(RepairState& st, int r, int32_t entry, int32_t old_q) {
  const bool was = old_q > st.own[entry];
  const bool is = st.quota[entry] > st.own[entry];
  st.spare[r] += static_cast<int32_t>(is) - static_cast<int32_t>(was);
}

// True when ranks a and d host at least two broadcasts in common: one shared broadcast cannot
// trade (a pull and a give on the same broadcast exclude each other). Shared broadcasts = AND of
// the two host bitsets.
bool share_two(const RepairState& st, int a, int d) {
  const uint64_t* bits_a = st.bits + static_cast<size_t>(a) * st.words;
  const uint64_t* bits_d = st.bits + static_cast<size_t>(d) * st.words;
  // NOTE: no popcount (not a single instruction on baseline x86-64): m & (m − 1) tells one bit
  // from several.
  int shared = 0;
  for (int w = 0; w < st.words && shared < 2; ++w) {
    const uint64_t m = bits_a[w] & bits_d[w];
    if (m != 0) shared += (m & (m - 1)) != 0 ? 2 : 1;
  }
  return shared >= 2;
}

// Receiver a takes from donor d's spare quota for its own routes, and hands d as much of its own
// spare quota, over the broadcasts both host (in expert order). a and d share two broadcasts or
// more (share_two).
void trade(const PlannerWorkspace& ws, RepairState& st, int a, int d) {
  if (st.spare[a] == 0 || st.spare[d] == 0) return;
  // Merge of the two sorted host lists.
  int ia = ws.host_begin[a];
  const int ia_end = ws.host_begin[a + 1];
  int id = ws.host_begin[d];
  const int id_end = ws.host_begin[d + 1];
  int n = 0;
  int32_t sum_pull = 0;
  int32_t sum_give = 0;
  while (ia != ia_end && id != id_end) {
    const int32_t ka = ws.host_list[ia];
    const int32_t kd = ws.host_list[id];
    if (ka < kd) {
      ++ia;
    } else if (kd < ka) {
      ++id;
    } else {
      sum_pull +=
          std::min(std::max(0, st.own[ia] - st.quota[ia]), std::max(0, st.quota[id] - st.own[id]));
      sum_give += std::max(0, st.quota[ia] - st.own[ia]);
      st.pair_a[n] = ia++;
      st.pair_d[n] = id++;
      ++n;
    }
  }
  const int32_t delta = std::min(sum_pull, sum_give);
  if (delta <= 0) return;
  int32_t take_left = delta;
  int32_t release_left = delta;
  for (int i = 0; i < n && (take_left > 0 || release_left > 0); ++i) {
    const int32_t ea = st.pair_a[i];
    const int32_t ed = st.pair_d[i];
    const int32_t q_a = st.quota[ea];
    const int32_t q_d = st.quota[ed];
    const int32_t pull = std::min(std::max(0, st.own[ea] - q_a), std::max(0, q_d - st.own[ed]));
    const int32_t give = std::max(0, q_a - st.own[ea]);
    const int32_t take = std::min(pull, take_left);
    const int32_t release = std::min(give, release_left);
    if (take == 0 && release == 0) continue;
    take_left -= take;
    release_left -= release;
    st.quota[ea] += take - release;
    st.quota[ed] += release - take;
    update_spare(st, a, ea, q_a);
    update_spare(st, d, ed, q_d);
  }
}

}  // namespace

void repair_quotas(const Topology& topo, const CountMatrix& counts, Plan& plan,
                   PlannerWorkspace& ws) {
  const int P = topo.num_ranks;
  const int B = static_cast<int>(plan.broadcasts.size());
  if (B < 2) return;

  ws.order.resize(B);
  for (int i = 0; i < B; ++i) ws.order[i] = i;
  std::sort(ws.order.begin(), ws.order.end(), [&](int32_t x, int32_t y) {
    const int32_t ex = plan.broadcasts[x].expert;
    const int32_t ey = plan.broadcasts[y].expert;
    return ex != ey ? ex < ey : x < y;
  });

  // Broadcasts hosted by each rank (CSR), as ascending positions in ws.order.
  ws.host_begin.assign(P + 1, 0);
  for (const Broadcast& b : plan.broadcasts) {
    for (int m = b.group_begin; m < b.group_begin + b.group_size; ++m) ++ws.host_begin[m + 1];
    if (!b.owner_in_group()) ++ws.host_begin[b.owner + 1];
  }
  for (int r = 0; r < P; ++r) ws.host_begin[r + 1] += ws.host_begin[r];
  ws.host_list.resize(ws.host_begin[P]);
  ws.members.assign(P, 0);  // fill cursor per rank
  auto push = [&](int r, int32_t k) { ws.host_list[ws.host_begin[r] + ws.members[r]++] = k; };
  for (int k = 0; k < B; ++k) {
    const Broadcast& b = plan.broadcasts[ws.order[k]];
    for (int m = b.group_begin; m < b.group_begin + b.group_size; ++m) push(m, k);
    if (!b.owner_in_group()) push(b.owner, k);
  }
  // Own routes and quotas per host entry, and spare counts per rank.
  const size_t num_entries = ws.host_list.size();
  ws.repair.resize(2 * num_entries + 2 * static_cast<size_t>(B) + P);
  RepairState st{ws.repair.data(),
                 ws.repair.data() + num_entries,
                 ws.repair.data() + 2 * num_entries,
                 ws.repair.data() + 2 * num_entries + P,
                 ws.repair.data() + 2 * num_entries + P + B,
                 nullptr,
                 0};
  const int words = (B + 63) / 64;
  ws.host_bits.assign(static_cast<size_t>(P) * words, 0);
  for (int r = 0; r < P; ++r) {
    uint64_t* bits = ws.host_bits.data() + static_cast<size_t>(r) * words;
    for (int32_t i = ws.host_begin[r]; i < ws.host_begin[r + 1]; ++i) {
      bits[ws.host_list[i] / 64] |= uint64_t{1} << (ws.host_list[i] % 64);
    }
  }
  st.bits = ws.host_bits.data();
  st.words = words;
  for (int r = 0; r < P; ++r) {
    st.spare[r] = 0;
    for (int32_t i = ws.host_begin[r]; i < ws.host_begin[r + 1]; ++i) {
      const Broadcast& b = plan.broadcasts[ws.order[ws.host_list[i]]];
      st.own[i] = counts.at(r, b.expert);
      st.quota[i] = b.quota[r];
      st.spare[r] += st.quota[i] > st.own[i] ? 1 : 0;
    }
  }

  // Pairs that share two broadcasts or more, the only ones whose trades can move anything; fixed
  // for the whole repair (trades change quotas, not hosts), so the 2 (P − 1) phases below test
  // one byte per pair.
  ws.pair_shares.assign(static_cast<size_t>(P) * P, 0);
  for (int a = 0; a < P; ++a) {
    for (int d = a + 1; d < P; ++d) {
      const uint8_t both = share_two(st, a, d) ? 1 : 0;
      ws.pair_shares[static_cast<size_t>(a) * P + d] = both;
      ws.pair_shares[static_cast<size_t>(d) * P + a] = both;
    }
  }

  const int seats = P + (P & 1);
  // ring = [1 .. seats − 1] (reuses `members`, free after the host lists are built).
  ws.members.resize(seats - 1);
  for (int i = 0; i < seats - 1; ++i) ws.members[i] = i + 1;
  int32_t* ring = ws.members.data();
  const int ring_size = seats - 1;
  auto run_pair = [&](int a, int d) {
    if (a >= P || d >= P) return;  // the bye seat of odd P
    if (ws.pair_shares[static_cast<size_t>(a) * P + d] == 0) return;
    trade(ws, st, a, d);
    trade(ws, st, d, a);
  };
  for (int phase = 0; phase < 2 * ring_size; ++phase) {
    run_pair(0, ring[0]);
    for (int w = 1; w <= seats / 2 - 1; ++w) run_pair(ring[w], ring[seats - 1 - w]);
    std::rotate(ring, ring + ring_size - 1, ring + ring_size);
  }
  for (int r = 0; r < P; ++r) {
    for (int32_t i = ws.host_begin[r]; i < ws.host_begin[r + 1]; ++i) {
      plan.broadcasts[ws.order[ws.host_list[i]]].quota[r] = st.quota[i];
    }
  }
}

}  // namespace iser

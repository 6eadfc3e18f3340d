// HALO-Q stage 4: quota repair (DESIGN §4.4).
//
// Interpretations (DESIGN:):
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

// Broadcasts hosted by both `a` and `d`, as positions in ws.order (ascending).
int shared_broadcasts(PlannerWorkspace& ws, int a, int d) {
  const int32_t* x = ws.host_list.data() + ws.host_begin[a];
  const int32_t* x_end = ws.host_list.data() + ws.host_begin[a + 1];
  const int32_t* y = ws.host_list.data() + ws.host_begin[d];
  const int32_t* y_end = ws.host_list.data() + ws.host_begin[d + 1];
  int n = 0;
  int32_t* out = ws.shared.data();
  while (x != x_end && y != y_end) {
    if (*x < *y) {
      ++x;
    } else if (*y < *x) {
      ++y;
    } else {
      out[n++] = *x;
      ++x;
      ++y;
    }
  }
  return n;
}

// Receiver a takes from donor d's spare quota for its own routes, and hands d as much of its own
// spare quota, over the broadcasts both host.
void trade(const CountMatrix& counts, Plan& plan, PlannerWorkspace& ws, int a, int d) {
  const int n = shared_broadcasts(ws, a, d);
  if (n == 0) return;
  int32_t sum_pull = 0;
  int32_t sum_give = 0;
  for (int i = 0; i < n; ++i) {
    const Broadcast& b = plan.broadcasts[ws.order[ws.shared[i]]];
    const int32_t c_a = counts.at(a, b.expert);
    const int32_t c_d = counts.at(d, b.expert);
    const int32_t q_a = b.quota[a];
    const int32_t q_d = b.quota[d];
    sum_pull += std::min(std::max(0, c_a - q_a), std::max(0, q_d - c_d));
    sum_give += std::max(0, q_a - c_a);
  }
  const int32_t delta = std::min(sum_pull, sum_give);
  if (delta <= 0) return;
  int32_t take_left = delta;
  int32_t release_left = delta;
  for (int i = 0; i < n && (take_left > 0 || release_left > 0); ++i) {
    Broadcast& b = plan.broadcasts[ws.order[ws.shared[i]]];
    const int32_t c_a = counts.at(a, b.expert);
    const int32_t c_d = counts.at(d, b.expert);
    const int32_t q_a = b.quota[a];
    const int32_t q_d = b.quota[d];
    const int32_t pull = std::min(std::max(0, c_a - q_a), std::max(0, q_d - c_d));
    const int32_t give = std::max(0, q_a - c_a);
    const int32_t take = std::min(pull, take_left);
    const int32_t release = std::min(give, release_left);
    take_left -= take;
    release_left -= release;
    b.quota[a] += take - release;
    b.quota[d] += release - take;
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
  ws.shared.resize(B);

  const int seats = P + (P & 1);
  // ring = [1 .. seats − 1] (reuses `members`, free after the host lists are built).
  ws.members.resize(seats - 1);
  for (int i = 0; i < seats - 1; ++i) ws.members[i] = i + 1;
  int32_t* ring = ws.members.data();
  const int ring_size = seats - 1;
  auto run_pair = [&](int a, int d) {
    if (a >= P || d >= P) return;  // the bye seat of odd P
    trade(counts, plan, ws, a, d);
    trade(counts, plan, ws, d, a);
  };
  for (int phase = 0; phase < 2 * ring_size; ++phase) {
    run_pair(0, ring[0]);
    for (int w = 1; w <= seats / 2 - 1; ++w) run_pair(ring[w], ring[seats - 1 - w]);
    std::rotate(ring, ring + ring_size - 1, ring + ring_size);
  }
}

}  // namespace iser

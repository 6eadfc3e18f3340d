// GPU planner (docs/design.md §4, §9): count, HALO-Q planner and route-rewrite kernels behind one
// host object. Every input and output lives in device memory; no call synchronises with the host,
// so a whole invocation (count -> all-gather -> plan -> rewrite) can be captured in a CUDA graph.
// The plans are bit-identical to the CPU reference planner (`plan_halo_q`, `rewrite_tokens`; with
// GpuPlannerOptions::iser, `plan_iser` without a previous plan).
//
// Errors: limits are checked on the host when the planner is built (iser::Error); everything
// that can only be seen on the device (an expert id out of range, an invalid count matrix, an
// internal planner failure, stale tile counts) sets a bit of a status word (GpuStatus). A plan
// whose status is not zero carries no broadcasts and the home loads, so a consumer that ignores
// the status still routes every token to its home slot: never a silent wrong plan.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "iser/plan.h"
#include "iser/topology.h"

struct CUstream_st;  // cudaStream_t without the CUDA headers

namespace iser {

// Limits of the GPU planner (docs/design.md §5: any P >= 2 up to 72, E <= 1024, S <= 16).
inline constexpr int kGpuMaxRanks = 72;
inline constexpr int kGpuMaxExperts = 1024;
inline constexpr int kGpuMaxSlots = 16;
inline constexpr int kGpuMaxRoutesPerRank = 262144;  // tau * k per rank
inline constexpr int kGpuPlanTimerSlots = 9;
// plan_rewrite's first rewrite CTA adds these after them (see set_plan_timer).
inline constexpr int kGpuRewriteTimerSlots = 5;
// GpuPlanner::plan_rewrite: how long a rewrite CTA waits for its plan before it gives up
// (kGpuPlanTimeout). The plan takes microseconds; the limit only turns a hang into a status bit
// and leaves room for compute-sanitizer, which slows the planner by orders of magnitude.
inline constexpr long long kGpuPlanWaitNs = 10'000'000'000LL;

// Stage 4 of the planner kernel, the quota repair (GpuPlanner::set_repair_schedule).
enum class RepairSchedule { kAuto, kPhases, kScheduled };
// RepairSchedule::kAuto repairs by pair lists and levels from this many ranks on.
inline constexpr int kGpuScheduledRepairMinRanks = 8;

// Status bits (device words; 0 = success).
enum GpuStatus : uint32_t {
  kGpuOk = 0,
  kGpuBadExpertId = 1u << 0,     // count/rewrite: an id outside [-1, E) (treated as "no expert")
  kGpuBadCounts = 1u << 1,       // plan: a count < 0 or > max routes per rank
  kGpuColoringFailed = 1u << 2,  // plan: no common free helper index (internal error)
  kGpuPlanOverflow = 1u << 3,    // plan: more broadcasts or quota entries than bounded (internal)
  kGpuPlanInvariant = 1u << 4,   // plan: a quota < 0 or quotas not summing to hist (internal)
  kGpuStaleTiles = 1u << 5,      // rewrite: tile counts from count() do not match the counts
  kGpuPlanNotOk = 1u << 6,       // rewrite: the plan's status was not 0 (home slots were used)
  kGpuPlanTimeout = 1u << 7,     // plan_rewrite: a CTA waited longer than kGpuPlanWaitNs for a
                                 // plan (its routes went home) or for the others to start
};
// "bad-expert-id|stale-tiles" style names of the set bits ("ok" for 0).
std::string describe_gpu_status(uint32_t status);

// HALO-Q variants the GPU planner runs (docs/design.md §4-§6); identical to HaloQOptions of the CPU
// planner for the same fields.
struct GpuPlannerOptions {
  bool owner_home = false;      // owner-home: an owner inside its group uses its home slot
  bool absorb = false;          // absorb: finer levels only when room >= give (else best room)
  bool owner_in_group = false;  // halo-q-owner-in: only the owner's own aligned group
  int32_t min_move = 0;         // skip replications moving fewer routes (cursor still advances)
  // iser (docs/design.md §5): plan_iser's candidate placements (the slack ladder), the best
  // kept, owner_home set; absorb / owner_in_group are ignored. Non-resident form only: the GPU
  // planner has no previous plan, so it equals plan_iser with HaloQOptions::previous = nullptr.
  // An expert may be broadcast more than once; rewrite(), plan_rewrite() and the batch forms
  // rewrite such plans as rewrite_tokens does (GpuPlanLayout).
  bool iser = false;
  // iser: plan the candidates one after the other on one warp (two candidate blocks of shared
  // memory) even where every candidate's block fits beside the others, whose warps then plan
  // them at once. The plans are the same, bit for bit; the sequential form is what large shapes
  // fall back to (e.g. P = 64, E = 1024, S = 16, g_min = 1), and this switch tests it at any size.
  bool iser_sequential = false;
};

// The GpuPlannerOptions that reproduce policy `policy` (the CPU HALO-Q family without state):
// halo-q, owner-home, absorb, halo-q-owner-in, iser-stateless. Throws iser::Error for any other
// policy (resident policies such as resident and iser need the previous plan, which the GPU
// planner does not keep; iser-stateless is iser without it).
GpuPlannerOptions gpu_planner_options(std::string_view policy);
// true when gpu_planner_options(policy) succeeds and a GpuPlanner accepts `topo` with
// `max_routes_per_rank` routes (the limits above); never throws.
bool gpu_planner_covers(std::string_view policy, const Topology& topo, int64_t max_routes_per_rank);

// Flat plan layout in device memory: int32 words at these offsets. Header words, then
//   loads[P]                          routes each rank computes after planning
//   broadcasts[max_broadcasts][8]     {expert, owner, level, group_begin, group_size, helper,
//                                      mode (TransportMode), previous}, plan order
//   quotas[max_broadcasts][P]         routes of the broadcast's expert each rank computes
// and the rewrite tables (derived from counts and quotas, docs/design.md §4.5):
//   expert_broadcast[E]               each expert's last broadcast (plan order), -1 when none
//   supply_begin[max_broadcasts][P]   residual supply of the ranks before r (north-west corner)
//   demand_end[max_broadcasts][P]     residual demand of the ranks up to r, inclusive
// `previous` is the broadcast of the same expert before this one, -1 when none: an iser plan may
// broadcast an expert more than once (to disjoint groups), and expert_broadcast plus `previous`
// list them. As in rewrite_tokens, the north-west corner of such an expert runs once on the
// quotas summed over its broadcasts: the tables of each of its broadcasts are those of the summed
// quotas. Only the first num_broadcasts rows of the per-broadcast arrays are meaningful.
struct GpuPlanLayout {
  static constexpr int kStatus = 0;         // GpuStatus bits of this plan
  static constexpr int kTarget = 1;         // T = ceil(total / P)
  static constexpr int kNumBroadcasts = 2;  // B (0 when status != 0)
  static constexpr int kFlags = 3;          // bit 0: owner_uses_home_slot
  static constexpr int kNumRanks = 4;
  static constexpr int kNumExperts = 5;
  static constexpr int kNumSlots = 6;
  static constexpr int kMaxBroadcasts = 7;
  static constexpr int kHeaderWords = 8;
  static constexpr int kBroadcastWords = 8;
  enum BroadcastField {
    kExpert,
    kOwner,
    kLevel,
    kGroupBegin,
    kGroupSize,
    kHelper,
    kMode,
    kPrevious
  };

  int num_ranks = 0;
  int num_experts = 0;
  int num_slots = 0;
  int max_broadcasts = 0;

  // Upper bound on broadcasts: every owner exports at most C = min(S, H), every rank receives at
  // most S and every group has at least the finest group size.
  // iser: an owner may export one expert more than once, so the owner cap is P * S.
  static GpuPlanLayout make(const Topology& topo, bool iser = false);

  constexpr int loads() const { return kHeaderWords; }
  constexpr int broadcasts() const { return loads() + num_ranks; }
  constexpr int quotas() const { return broadcasts() + kBroadcastWords * max_broadcasts; }
  constexpr int expert_broadcast() const { return quotas() + max_broadcasts * num_ranks; }
  constexpr int supply_begin() const { return expert_broadcast() + num_experts; }
  constexpr int demand_end() const { return supply_begin() + max_broadcasts * num_ranks; }
  constexpr int total_words() const { return demand_end() + max_broadcasts * num_ranks; }
};

// Host copy of a device plan (plan_words = GpuPlanLayout::total_words() words) as an iser::Plan
// (resident = false). Throws iser::Error when the words' header does not match the layout.
Plan plan_from_words(const GpuPlanLayout& layout, std::span<const int32_t> plan_words);
// Synchronous device -> host copy of one plan (tests, tools; not for the hot path). The copy is on
// the default stream: synchronise a non-blocking stream that wrote the plan first.
Plan download_plan(const GpuPlanLayout& layout, const int32_t* device_plan);
uint32_t download_plan_status(const int32_t* device_plan);

class GpuPlanner {
 public:
  // max_routes_per_rank: largest tau * k one row of count()/rewrite() carries; max_rows: most
  // rows (ranks x invocations) one count()/rewrite_all() call handles. Throws iser::Error when
  // the topology or the routes are beyond the limits above, or when the topology has more than
  // one LSA team (lsa_size < P: the GPU planner has no teams; plan on the CPU). Returns with its
  // device state initialised (it waits for its own set-up on the default stream), so any stream may
  // use it.
  GpuPlanner(const Topology& topo, int max_routes_per_rank, const GpuPlannerOptions& options = {},
             int max_rows = 1);
  ~GpuPlanner();
  GpuPlanner(GpuPlanner&&) noexcept;
  GpuPlanner& operator=(GpuPlanner&&) noexcept;
  GpuPlanner(const GpuPlanner&) = delete;
  GpuPlanner& operator=(const GpuPlanner&) = delete;

  const Topology& topology() const;
  const GpuPlanLayout& layout() const;
  const GpuPlannerOptions& options() const;
  int plan_words() const { return layout().total_words(); }

  // topk_ids [num_rows][num_tokens * top_k] (-1 = none) -> counts [num_rows][E]. Also records
  // per-tile counts that rewrite() needs: rewrite the same ids after counting them, in stream
  // order. Ids outside [-1, E) are ignored and set kGpuBadExpertId in the error word.
  void count(const int32_t* topk_ids, int num_tokens, int top_k, int32_t* counts,
             CUstream_st* stream, int num_rows = 1);

  // Where count() of num_rows rows of num_tokens * top_k routes writes besides the counts, for a
  // count done by another kernel (Runtime::count_and_exchange): the per-tile histograms and the
  // error word. Records that shape as counted, as count() does (rewrite() and plan_rewrite*()
  // check it); the caller's kernel must write them, in stream order before the rewrite.
  struct CountOutputs {
    int32_t* tile_counts = nullptr;
    uint32_t* error_word = nullptr;
  };
  CountOutputs count_outputs(int num_tokens, int top_k, int num_rows = 1);

  // All-gathered counts [num_plans][P][E] -> plans [num_plans][plan_words()] (one CTA each).
  void plan(const int32_t* counts, int32_t* plans, CUstream_st* stream, int num_plans = 1);

  // Rank rank_idx's topk_ids [num_tokens * top_k] -> global slot ids (docs/design.md §3), given the
  // full counts [P][E] of the invocation and its plan. Needs the tile counts of the last count() of
  // these ids (the ids of one row). -1 stays -1; ids out of range become -1.
  void rewrite(const int32_t* topk_ids, int num_tokens, int top_k, int rank_idx,
               const int32_t* counts, const int32_t* plan, int32_t* slot_ids, CUstream_st* stream);
  // Every rank of num_plans invocations at once: topk_ids [num_plans][P][n] counted by one
  // count(..., num_rows = num_plans * P), counts [num_plans][P][E], plans [num_plans][words].
  void rewrite_all(const int32_t* topk_ids, int num_tokens, int top_k, const int32_t* counts,
                   const int32_t* plans, int num_plans, int32_t* slot_ids, CUstream_st* stream);

  // plan() then rewrite() of rank rank_idx, as one cooperative kernel (src/cuda/plan_rewrite.cuh):
  // no second kernel boundary, and the rewrite's plan-independent work (ids, route ordinals) runs
  // while the plan is made. The plan words and slot ids are those of plan() + rewrite(), bit for
  // bit, and so are the status bits, except that the last tile checks the tile counts of every
  // expert (not only the broadcast ones) for kGpuStaleTiles, and that a rewrite CTA that waits
  // longer than kGpuPlanWaitNs for its plan sets kGpuPlanTimeout and uses home slots. Needs the
  // tile counts of the last count() of these ids.
  void plan_rewrite(const int32_t* counts, int32_t* plan, const int32_t* topk_ids, int num_tokens,
                    int top_k, int rank_idx, int32_t* slot_ids, CUstream_st* stream);
  // plan() of num_plans invocations and rewrite_all() of all their ranks: one kernel, or several
  // in stream order when num_plans exceeds half the CTAs the device holds at once.
  void plan_rewrite_all(const int32_t* counts, int32_t* plans, const int32_t* topk_ids,
                        int num_tokens, int top_k, int num_plans, int32_t* slot_ids,
                        CUstream_st* stream);

  // Sticky device error word of count()/rewrite() (GpuStatus bits; the plans carry their own).
  uint32_t* error_word() const;
  void clear_errors(CUstream_st* stream);
  // Synchronous (tests, tools): a copy on the default stream, which does not wait for a
  // non-blocking stream; synchronise the stream of the kernels first.
  uint32_t read_errors() const;

  // Optional profiling: CTA 0 of plan() writes kGpuPlanTimerSlots device globaltimer values (ns)
  // to this device array: start, after stage 1, after placement, after the repair set-up and
  // transport modes, after the repair's pair lists, after its levels (none up to P = 24), after
  // its trades, end, and the end of the slot coloring (warp 0 colours beside the set-up and
  // repair, which warp 1 stamps). plan_rewrite() / plan_rewrite_all() also write
  // kGpuRewriteTimerSlots more (so the array needs kGpuPlanTimerSlots + kGpuRewriteTimerSlots):
  // its first rewrite CTA's start, its ordinals done (before it waits for the plan), the plan
  // seen, the plan's tables staged, and its routes written.
  // nullptr (default) disables it.
  void set_plan_timer(unsigned long long* device_timer);
  // How the planner kernel runs stage 4, the quota repair (the plans are the same, bit for bit):
  // kPhases walks the 2(P-1) circle-method phases, one warp per pair and a barrier per phase
  // (up to 6 ranks, and at most 32 broadcasts, on one warp with every quota in registers);
  // kScheduled first lists the pairs that can trade and their dependency levels, then trades
  // level by level on one warp (plan_repair.cuh); kAuto (default) takes kScheduled from
  // kGpuScheduledRepairMinRanks ranks on, where it measured faster on H200 (planner time EP8
  // -9%, EP16 -21%, EP32 -38%, EP64 -62%; EP4 +3%: docs/benchmarks.md), and kPhases below.
  void set_repair_schedule(RepairSchedule schedule);

 private:
  struct Impl;
  Impl* impl_ = nullptr;
};

}  // namespace iser

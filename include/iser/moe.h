// Expert compute of the reference EP MoE layer (docs/design.md §10): a gated MLP per expert slot,
//   y = W2 · (silu(W1 · x) ⊙ (W3 · x)),
// bf16 weights and activations, fp32 accumulation, over the H home + S helper slots of one rank,
// computed with cuBLAS (cublasLt calls per non-empty slot by default; see GemmBackend).
//
// Device buffers cross this API as untyped pointers and streams as `Stream` (the opaque
// CUstream_st* behind cudaStream_t), so the header needs no CUDA include.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "iser/counts.h"
#include "iser/plan.h"
#include "iser/topology.h"

struct CUstream_st;

namespace iser::moe {

using Stream = CUstream_st*;  // a cudaStream_t; nullptr is the legacy default stream

// One routed expert's shape. Default: DeepSeek-V4-Pro (He = 7168, I = 3072).
struct ExpertShape {
  int hidden = 7168;        // He
  int intermediate = 3072;  // I

  int64_t w13_elems() const { return 2LL * intermediate * hidden; }
  int64_t w2_elems() const { return static_cast<int64_t>(hidden) * intermediate; }
  // Bytes of one expert's bf16 weights (its bundle, without scales).
  int64_t bundle_bytes() const { return 2 * (w13_elems() + w2_elems()); }
  // Multiply-adds x2 per routed token (both GEMMs).
  int64_t flops_per_route() const { return 6LL * hidden * intermediate; }
  // Throws iser::Error unless both are positive multiples of 8 (16-byte rows).
  void check() const;
};

// One slot's weights, device pointers, bf16, row-major:
//   w13 [2I, He]: rows [0, I) are W1 (gate), rows [I, 2I) are W3 (up);  w2 [He, I].
struct SlotWeights {
  const void* w13 = nullptr;
  const void* w2 = nullptr;
};

// Fills one expert's weights with the pseudo-random values ExpertBank::fill_slot_random gives
// slot `expert_idx`: the same bytes wherever the expert lives (a bank, symmetric memory).
void fill_expert_random(void* w13, void* w2, const ExpertShape& shape, int expert_idx,
                        uint64_t seed, float scale, Stream stream);

// Device-resident bf16 weights of `num_slots` experts, contiguous per slot. Filled with
// deterministic pseudo-random values (seeded per slot) so tests and benchmarks need no files.
class ExpertBank {
 public:
  ExpertBank(ExpertShape shape, int num_slots);
  ~ExpertBank();
  ExpertBank(ExpertBank&&) noexcept;
  ExpertBank& operator=(ExpertBank&&) noexcept;

  const ExpertShape& shape() const;
  int num_slots() const;
  SlotWeights slot(int slot_idx) const;
  void* w13(int slot_idx);
  void* w2(int slot_idx);
  // Values uniform in [-scale, scale), a function of (seed, slot_idx, element) only.
  void fill_random(uint64_t seed, float scale, Stream stream);
  void fill_slot_random(int slot_idx, uint64_t seed, float scale, Stream stream);
  // Byte copy of one slot (a replica): this[dst_slot] = src[src_slot].
  void copy_slot_from(int dst_slot, const ExpertBank& src, int src_slot, Stream stream);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// How the two GEMM passes run.
enum class GemmBackend : uint8_t {
  // cublasLt, one call per non-empty slot (spread over forked streams, see GroupedMlpOptions),
  // with one algorithm per pass pinned at construction (no split-K). Each output element's
  // accumulation order then depends on the expert shape only, so a token's output bytes do not
  // depend on its slot's row count or its position: the ON/OFF bitwise guarantee rests on this.
  // The default.
  kLtPinned = 0,
  // cublasGemmGroupedBatchedEx, one call per pass for all slots. cuBLAS picks kernels from the
  // whole problem set, so a token's output can differ in the last bits between groupings
  // (measured on H200); kept for comparison.
  kGrouped = 1,
};

// Scheduling of the kLtPinned backend (ignored by kGrouped). None of these changes a token's
// output bytes: every row is computed by the pinned algorithm or by a tail algorithm verified
// on the device to give the pinned algorithm's bytes (src/moe/lt_gemm.h). The defaults are the
// fastest ON schedule of the E3 variant matrix on H200 (docs/benchmarks.md).
struct GroupedMlpOptions {
  GemmBackend backend = GemmBackend::kLtPinned;
  // Streams the per-slot work is spread over (forked from and joined to the caller's stream);
  // each holds a 32 MiB cuBLAS workspace.
  int num_lanes = 8;
  // true: each slot runs GEMM 1 -> SiLU-multiply -> GEMM 2 on its lane, slots dealt to lanes
  // largest first to the least-loaded lane (no join between the passes). false: two passes,
  // slots round-robin in slot order, one SiLU-multiply over all rows in between.
  bool chain_slots = true;
  // Smallest row granule of a tail algorithm (see PinnedLtGemm); 0: no tail algorithms (a
  // slot's last partial granule runs on the pinned algorithm, padded).
  int min_tail_granule = 8;
  // Chained slots only: slots with fewer rows than this run on two extra lanes of the highest
  // stream priority, smallest first, so that their weight streaming (a small slot reads its whole
  // 132 MB bundle for little math) interleaves with the large slots' tiles instead of trailing
  // them. 0: off (every slot on the ordinary lanes). The outputs do not change (each slot keeps
  // its algorithms; only the stream it runs on differs).
  int priority_below_rows = 0;
  // The row count the pinned algorithms are chosen for (cublasLt's heuristic); 0: min(max_rows,
  // 1024). Two GroupedMlp of one shape give a token the same bytes when they pin the same
  // algorithms: the EP graph mode sets EpMoeLayer's value so that its output equals the eager
  // layer's although its max_rows differs.
  int reference_rows = 0;
};

// Grouped gated MLP over the slots of one rank. Rows of x are grouped by slot, in slot order:
// slot s owns rows [offset[s], offset[s] + rows_per_slot[s]) with offset the exclusive prefix
// sum. Empty slots launch nothing. One instance serves one stream at a time (its scratch buffers
// are stream-ordered); run() is asynchronous and capturable in a CUDA graph (its problem sizes
// are host values fixed at capture).
class GroupedMlp {
 public:
  GroupedMlp(ExpertShape shape, int num_slots, int64_t max_rows,
             GemmBackend backend = GemmBackend::kLtPinned);
  GroupedMlp(ExpertShape shape, int num_slots, int64_t max_rows, const GroupedMlpOptions& options);
  ~GroupedMlp();
  GroupedMlp(GroupedMlp&&) noexcept;
  GroupedMlp& operator=(GroupedMlp&&) noexcept;

  const ExpertShape& shape() const;
  int num_slots() const;
  int64_t max_rows() const;
  GemmBackend backend() const;
  const GroupedMlpOptions& options() const;
  std::string describe() const;  // backend, scheduling and algorithms, for benchmark headers
  // Rows the GEMM launches of run(rows_per_slot) compute, both passes summed: each slot's rows
  // rounded up to the row granules of the algorithms that run them (kLtPinned; 0 for kGrouped,
  // whose kernels are not known). 2 * sum(rows_per_slot) when nothing is padded.
  int64_t padded_rows(std::span<const int32_t> rows_per_slot) const;

  // Pointer table of every slot (num_slots entries, none null). Stream-ordered on `stream`.
  void set_weights(std::span<const SlotWeights> slots, Stream stream);
  // x, y: [sum(rows_per_slot), He] bf16 device buffers (may not alias). Throws iser::Error when
  // the row count exceeds max_rows or rows_per_slot has the wrong size or a negative entry.
  void run(const void* x, std::span<const int32_t> rows_per_slot, void* y, Stream stream);
  // CUDA-graph capture only (`stream` must be capturing; CUDA 12.8+): the row count of each slot
  // is chosen on the device. Slots [first_slot, first_slot + handles.size()) own row regions of
  // slot_rows rows (slot s: rows [s * slot_rows, ...) of x and y); slot s gets a switch node on
  // conditional handle handles[s - first_slot] (a cudaGraphConditionalHandle of the graph being
  // captured) whose body v computes the region's first bucket_rows[v] rows (increasing, each in
  // [1, slot_rows]); a value >= bucket_rows.size() runs nothing. The caller sets the values
  // upstream in the same graph (cudaGraphSetConditional). Slots are dealt round-robin over the
  // lanes. kLtPinned only; a token's bytes are those of run() (pinned algorithms).
  void run_switched(const void* x, void* y, int64_t slot_rows, int first_slot,
                    std::span<const uint64_t> handles, std::span<const int32_t> bucket_rows,
                    Stream stream);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Routes each local slot of each rank computes under `plan`: [P][H + S], row-major. A home slot
// keeps its expert's routes that no helper slot takes; helper slot H + h_b of a host r in G_b
// takes q_b[r]; an owner outside G_b (or any owner when plan.owner_uses_home_slot) serves its
// quota from its home slot. Row sums equal plan.loads (checked; iser::Error otherwise).
std::vector<int32_t> slot_loads(const Topology& topo, const CountMatrix& counts, const Plan& plan);

// Host-side fp32 reference of one slot (tests): y = W2 · bf16(silu(h1) · h3) with h = bf16(W·x),
// mirroring the device rounding points. Inputs are bf16 bit patterns (uint16_t).
std::vector<float> reference_gated_mlp(const ExpertShape& shape, std::span<const uint16_t> w13,
                                       std::span<const uint16_t> w2, std::span<const uint16_t> x,
                                       int num_rows);

}  // namespace iser::moe

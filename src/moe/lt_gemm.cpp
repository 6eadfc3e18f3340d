#include "moe/lt_gemm.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "cuda/device_buffer.h"
#include "cuda/moe_kernels.h"
#include "iser/error.h"
#include "moe/cublas_check.h"

namespace iser::moe {

using cuda::DeviceBuffer;
namespace {

// -1 where the attribute cannot be read.
template <typename T>
long long algo_attr_or(const cublasLtMatmulAlgo_t& algo,
                       cublasLtMatmulAlgoConfigAttributes_t attr) {
  T value{};
  size_t written = 0;
  return cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &value, sizeof(value), &written) ==
                 CUBLAS_STATUS_SUCCESS
             ? static_cast<long long>(value)
             : -1;
}

// Rows (n) one launch of `algo` pads to: tile n times cluster n; 0 where either is unknown.
int algo_granule(const cublasLtMatmulAlgo_t& algo) {
  const long long tile = algo_attr_or<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_TILE_ID);
  const long long cluster = algo_attr_or<uint16_t>(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID);
  const LtShape t = lt_tile_shape(tile < 0 ? 0 : static_cast<uint32_t>(tile));
  // Cluster id 0 (AUTO) and unreadable ids count as 1x1: only an explicit shape is known.
  const LtShape c = cluster <= 0 ? LtShape{1, 1} : lt_cluster_shape(static_cast<uint32_t>(cluster));
  return t.n * c.n;
}

std::string algo_description(const cublasLtMatmulAlgo_t& algo) {
  const long long tile = algo_attr_or<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_TILE_ID);
  const long long cluster = algo_attr_or<uint16_t>(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID);
  const LtShape t = lt_tile_shape(tile < 0 ? 0 : static_cast<uint32_t>(tile));
  const LtShape c = cluster <= 0 ? LtShape{} : lt_cluster_shape(static_cast<uint32_t>(cluster));
  return fmt::format("algo {} tile {}x{} stages {} cluster {}x{} swizzle {} custom {}",
                     algo_attr_or<int32_t>(algo, CUBLASLT_ALGO_CONFIG_ID), t.m, t.n,
                     algo_attr_or<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID), c.m, c.n,
                     algo_attr_or<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
                     algo_attr_or<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION));
}

// The cluster shape id with extents m x n, or -1.
int cluster_id_of(int m, int n) {
  for (uint32_t id = 2; id < 256; ++id) {
    const LtShape c = lt_cluster_shape(id);
    if (c.m == 0) break;
    if (c.m == m && c.n == n) return static_cast<int>(id);
  }
  return -1;
}

// Split-K (or any reduction across CTAs) sums partial products in an order that depends on n.
bool reduces_across_ctas(const cublasLtMatmulAlgo_t& algo) {
  return algo_attr_or<int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM) > 1 ||
         algo_attr_or<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME) > 0;
}

bool same_algo(const cublasLtMatmulAlgo_t& a, const cublasLtMatmulAlgo_t& b) {
  return std::memcmp(&a, &b, sizeof(a)) == 0;
}

// Largest power of two dividing `bytes`, at most 256: the alignment every row offset keeps.
uint32_t row_alignment(int64_t bytes) {
  uint32_t align = 256;
  while (align > 1 && bytes % align != 0) align /= 2;
  return align;
}

// Tail verification is a device check of a few hundred small GEMMs; GroupedMlp instances of
// one shape (one per logical rank) share its result within the process.
struct TailCacheEntry {
  std::vector<LtAlgo> tails;
  int rejected = 0;
};
std::mutex& tail_cache_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::map<std::string, TailCacheEntry>& tail_cache() {
  static std::map<std::string, TailCacheEntry> cache;
  return cache;
}

}  // namespace

PinnedLtGemm::PinnedLtGemm(cublasLtHandle_t lt, int m, int k, int reference_n, int64_t max_n,
                           size_t workspace_bytes, int min_tail_granule)
    : lt_(lt), m_(m), k_(k) {
  try {
    pin(reference_n, max_n, workspace_bytes);
    pin_tails(min_tail_granule, workspace_bytes);
  } catch (...) {
    release();  // the destructor does not run for a constructor that throws
    throw;
  }
}

bool PinnedLtGemm::valid_at(const cublasLtMatmulAlgo_t& algo, std::initializer_list<int64_t> ns,
                            size_t workspace_bytes) {
  bool valid = true;
  for (int64_t n : ns) {
    if (n < 1) continue;
    set_n(n);
    cublasLtMatmulHeuristicResult_t check{};
    valid = valid &&
            cublasLtMatmulAlgoCheck(lt_, desc_, a_, b_, d_, d_, &algo, &check) ==
                CUBLAS_STATUS_SUCCESS &&
            check.workspaceSize <= workspace_bytes;
  }
  return valid;
}

void PinnedLtGemm::pin(int reference_n, int64_t max_n, size_t workspace_bytes) {
  const int m = m_, k = k_;
  ISER_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  ISER_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a,
                                                   sizeof(trans_a)));
  ISER_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b,
                                                   sizeof(trans_b)));
  ISER_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a_, CUDA_R_16BF, k, m, k));
  ISER_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b_, CUDA_R_16BF, k, reference_n, k));
  ISER_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d_, CUDA_R_16BF, m, reference_n, m));
  current_n_ = reference_n;

  std::array<cublasLtMatmulHeuristicResult_t, 16> results{};
  const int found = heuristics(reference_n, workspace_bytes, results);

  // The first heuristic candidate that runs without split-K at every n we will use.
  bool pinned = false;
  for (int i = 0; i < found && !pinned; ++i) {
    if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
    const cublasLtMatmulAlgo_t algo = results[i].algo;
    // Split-K candidates are skipped (not reconfigured: not every kernel accepts a changed
    // configuration).
    if (algo_attr_or<int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM) > 1) continue;
    if (!valid_at(algo, {1, reference_n, max_n}, workspace_bytes)) continue;
    pinned_ = {algo, algo_granule(algo), algo_description(algo)};
    pinned = true;
  }
  ISER_CHECK(pinned, "cublasLt: no split-K-free algorithm valid for {}x{}x[1, {}] ({} candidates)",
             m, k, max_n, found);
}

int PinnedLtGemm::heuristics(int64_t n, size_t workspace_bytes,
                             std::span<cublasLtMatmulHeuristicResult_t> results) {
  set_n(n);
  cublasLtMatmulPreference_t pref = nullptr;
  ISER_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  // Calls start at any row of B and D: only the alignment of a row offset is guaranteed.
  const uint32_t align_b = row_alignment(int64_t{k_} * 2);
  const uint32_t align_d = row_alignment(int64_t{m_} * 2);
  cublasStatus_t status = cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes, sizeof(workspace_bytes));
  if (status == CUBLAS_STATUS_SUCCESS) {
    status = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                  &align_b, sizeof(align_b));
  }
  if (status == CUBLAS_STATUS_SUCCESS) {
    status = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                  &align_d, sizeof(align_d));
  }
  int found = 0;
  if (status == CUBLAS_STATUS_SUCCESS) {
    status = cublasLtMatmulAlgoGetHeuristic(
        lt_, desc_, a_, b_, d_, d_, pref, static_cast<int>(results.size()), results.data(), &found);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  ISER_CUBLAS_CHECK(status);
  return found;
}

void PinnedLtGemm::pin_tails(int min_tail_granule, size_t workspace_bytes) {
  const int granule = pinned_.granule;
  if (min_tail_granule <= 0 || granule <= min_tail_granule) return;
  int device = 0;
  ISER_CUDA_CHECK(cudaGetDevice(&device));
  std::string key = fmt::format("{}:{}:{}:{}:", device, m_, k_, min_tail_granule);
  key.append(reinterpret_cast<const char*>(&pinned_.algo), sizeof(pinned_.algo));
  {
    const std::lock_guard lock(tail_cache_mutex());
    const auto it = tail_cache().find(key);
    if (it != tail_cache().end()) {
      tails_ = it->second.tails;
      rejected_tails_ = it->second.rejected;
      for (const LtAlgo& tail : tails_) tail_granules_.push_back(tail.granule);
      return;
    }
  }

  // Candidates, most likely identical first: the pinned kernel without its cluster's n extent,
  // then what the heuristic proposes for small n. Each must run at every n below the granule.
  std::vector<LtAlgo> candidates;
  const auto consider = [&](const cublasLtMatmulAlgo_t& algo) {
    const int g = algo_granule(algo);
    if (g < min_tail_granule || g >= granule || reduces_across_ctas(algo)) return;
    for (const LtAlgo& c : candidates) {
      if (same_algo(c.algo, algo)) return;
    }
    if (!valid_at(algo, {1, g, granule - 1}, workspace_bytes)) return;
    candidates.push_back({algo, g, algo_description(algo)});
  };
  const long long cluster =
      algo_attr_or<uint16_t>(pinned_.algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID);
  const LtShape c = cluster <= 0 ? LtShape{} : lt_cluster_shape(static_cast<uint32_t>(cluster));
  for (const int cluster_m : {c.m, 1}) {
    const int cluster_id = c.n > 1 ? cluster_id_of(cluster_m, 1) : -1;
    if (cluster_id < 0) continue;
    const auto id = static_cast<uint16_t>(cluster_id);
    cublasLtMatmulAlgo_t algo = pinned_.algo;
    if (cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &id,
                                             sizeof(id)) == CUBLAS_STATUS_SUCCESS) {
      consider(algo);
    }
  }
  for (int n = granule / 2; n >= std::max(min_tail_granule / 2, 8); n /= 2) {
    for (const cublasLtMatmulAlgo_t& algo : proposals(n, workspace_bytes)) consider(algo);
  }

  verify_tails(candidates, workspace_bytes);
  const std::lock_guard lock(tail_cache_mutex());
  tail_cache()[key] = {tails_, rejected_tails_};
}

// Admits, per granule, the first candidate whose bytes equal the pinned algorithm's at every
// row count in [1, granule): a candidate that picks its kernel or its K split by problem size
// differs at some n and is rejected. A quick check at the largest n comes first.
void PinnedLtGemm::verify_tails(const std::vector<LtAlgo>& candidates, size_t workspace_bytes) {
  const int granule = pinned_.granule;
  std::vector<int> all_n(granule - 1);
  for (int n = 1; n < granule; ++n) all_n[n - 1] = n;
  const std::array<int, 1> quick = {granule - 1};
  for (const LtAlgo& candidate : candidates) {
    const bool covered = std::any_of(tails_.begin(), tails_.end(), [&](const LtAlgo& t) {
      return t.granule == candidate.granule;
    });
    if (covered) continue;
    if (!matches_pinned(candidate.algo, quick, workspace_bytes) ||
        !matches_pinned(candidate.algo, all_n, workspace_bytes)) {
      ++rejected_tails_;
      continue;
    }
    tails_.push_back(candidate);
  }
  std::sort(tails_.begin(), tails_.end(),
            [](const LtAlgo& x, const LtAlgo& y) { return x.granule > y.granule; });
  for (const LtAlgo& tail : tails_) tail_granules_.push_back(tail.granule);
}

bool PinnedLtGemm::matches_pinned(const cublasLtMatmulAlgo_t& candidate, std::span<const int> ns,
                                  size_t workspace_bytes) {
  if (ns.empty()) return true;
  const int max_n = *std::max_element(ns.begin(), ns.end());
  ISER_CHECK(*std::min_element(ns.begin(), ns.end()) >= 1,
             "lt gemm: probe row counts must be >= 1");
  const int64_t m = m_, k = k_;
  DeviceBuffer a(static_cast<size_t>(m * k) * 2), b(static_cast<size_t>(max_n * k) * 2);
  DeviceBuffer d_ref(static_cast<size_t>(max_n * m) * 2), d(d_ref.bytes());
  DeviceBuffer workspace(workspace_bytes), counters(static_cast<size_t>(max_n + 1) * 4);
  cudaStream_t stream = nullptr;  // legacy stream; the counter download synchronises
  // Weights ~ 1/sqrt(K) scale keep outputs O(1), far from bf16 overflow and underflow.
  cuda::launch_fill_uniform({a.get<uint16_t>(), m * k, 0x7a11ull, 1.0f / 64}, stream);
  cuda::launch_fill_uniform({b.get<uint16_t>(), max_n * k, 0xb0b0ull, 1.0f}, stream);
  launch(pinned_, a.get(), b.get(), d_ref.get(), max_n, workspace.get(), workspace_bytes, stream);
  ISER_CUDA_CHECK(cudaMemsetAsync(counters.get(), 0, counters.bytes(), stream));
  bool launched = true;
  for (const int n : ns) {
    // NaN fill: rows the candidate failed to write never compare equal.
    ISER_CUDA_CHECK(cudaMemsetAsync(d.get(), 0xff, static_cast<size_t>(n * m) * 2, stream));
    // A candidate cuBLAS refuses at some n is not usable there: rejected, not an error.
    launched = launched && try_launch(candidate, a.get(), b.get(), d.get(), n, workspace.get(),
                                      workspace_bytes, stream) == CUBLAS_STATUS_SUCCESS;
    cuda::launch_count_mismatches(
        {d_ref.get<uint16_t>(), d.get<uint16_t>(), n * m, counters.get<uint32_t>() + n}, stream);
  }
  std::vector<uint32_t> mismatches(max_n + 1);
  ISER_CUDA_CHECK(
      cudaMemcpy(mismatches.data(), counters.get(), counters.bytes(), cudaMemcpyDeviceToHost));
  return launched &&
         std::all_of(mismatches.begin(), mismatches.end(), [](uint32_t x) { return x == 0; });
}

std::vector<cublasLtMatmulAlgo_t> PinnedLtGemm::proposals(int64_t n, size_t workspace_bytes) {
  std::array<cublasLtMatmulHeuristicResult_t, 16> results{};
  const int found = heuristics(n, workspace_bytes, results);
  std::vector<cublasLtMatmulAlgo_t> algos;
  for (int i = 0; i < found; ++i) {
    if (results[i].state == CUBLAS_STATUS_SUCCESS) algos.push_back(results[i].algo);
  }
  return algos;
}

PinnedLtGemm::~PinnedLtGemm() {
  release();
}

void PinnedLtGemm::release() noexcept {
  if (d_ != nullptr) cublasLtMatrixLayoutDestroy(d_);
  if (b_ != nullptr) cublasLtMatrixLayoutDestroy(b_);
  if (a_ != nullptr) cublasLtMatrixLayoutDestroy(a_);
  if (desc_ != nullptr) cublasLtMatmulDescDestroy(desc_);
}

void PinnedLtGemm::set_n(int64_t n) {
  if (n == current_n_) return;
  const uint64_t cols = static_cast<uint64_t>(n);
  ISER_CUBLAS_CHECK(
      cublasLtMatrixLayoutSetAttribute(b_, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof(cols)));
  ISER_CUBLAS_CHECK(
      cublasLtMatrixLayoutSetAttribute(d_, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof(cols)));
  current_n_ = n;
}

cublasStatus_t PinnedLtGemm::try_launch(const cublasLtMatmulAlgo_t& algo, const void* a,
                                        const void* b, void* d, int64_t n, void* workspace,
                                        size_t workspace_bytes, cudaStream_t stream) {
  set_n(n);
  const float alpha = 1.0f, beta = 0.0f;
  return cublasLtMatmul(lt_, desc_, &alpha, a, a_, b, b_, &beta, d, d_, d, d_, &algo, workspace,
                        workspace_bytes, stream);
}

void PinnedLtGemm::launch(const LtAlgo& algo, const void* a, const void* b, void* d, int64_t n,
                          void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  ISER_CUBLAS_CHECK(try_launch(algo.algo, a, b, d, n, workspace, workspace_bytes, stream));
}

void PinnedLtGemm::run(const void* a, const void* b, void* d, int64_t n, void* workspace,
                       size_t workspace_bytes, cudaStream_t stream) {
  const auto* b_rows = static_cast<const uint16_t*>(b);
  auto* d_rows = static_cast<uint16_t*>(d);
  for_each_piece(n, [&](const LtAlgo& algo, int64_t row, int64_t rows) {
    launch(algo, a, b_rows + row * k_, d_rows + row * m_, rows, workspace, workspace_bytes, stream);
  });
}

int64_t PinnedLtGemm::padded_rows(int64_t n) const {
  int64_t padded = 0;
  for_each_piece(n, [&](const LtAlgo& algo, int64_t, int64_t rows) {
    const int64_t g = std::max(algo.granule, 1);
    padded += (rows + g - 1) / g * g;
  });
  return padded;
}

std::string PinnedLtGemm::description() const {
  std::string text = fmt::format("{} (granule {})", pinned_.description, pinned_.granule);
  for (const LtAlgo& tail : tails_) {
    text += fmt::format(" | tail (granule {}): {}", tail.granule, tail.description);
  }
  if (rejected_tails_ > 0) {
    text += fmt::format(" | {} tail candidate(s) not bitwise equal", rejected_tails_);
  }
  return text;
}

}  // namespace iser::moe

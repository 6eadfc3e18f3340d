// Vocabulary of the replication kernels (src/cuda: replicate, host lane, count exchange, READY
// gate, fallback), shared with the runtime API (iser/runtime.h) that drives them: the slice they
// move, their limits, the device-side generation sentinel, the copy paths they implement and the
// status codes they report. No CUDA types.
#pragma once

#include <cstdint>

namespace iser {

inline constexpr int64_t kSliceBytes = 8192;     // replication unit
inline constexpr int kMaxCopyStagesPerCta = 22;  // 176 KiB of shared memory per copy CTA
inline constexpr int kMaxLocalCopyOps = 4096;
// Pass as the generation (or epoch) to take it from the device-side counter of each local rank
// instead of the host: `replicate` and `exchange_counts` use the rank's last value + 1,
// `ready_gate` and `release_bank` the generation the rank's last `replicate` used. This is what
// makes a captured CUDA graph replayable (docs/runtime.md).
// NOTE: a kDeviceGeneration gate or release reads a counter that only the replicate kernel
// advances, so it must be stream-ordered after its replicate (the same stream, or an event).
// The device checks it: a kDeviceGeneration gate (release) that finds no generation newer than
// the one the rank's previous gate (release) acted on reports kGateEarly and validates
// (releases) nothing; the routes then fall back home.
inline constexpr uint64_t kDeviceGeneration = 0;

// How the SM transports (p2p-direct, p2p-sami, plan) move a slice through the SM: a tuning knob
// of the copy loop, not a way of moving bytes between ranks (that is Transport / TransportMode);
// every path moves the same slices between the same ranks.
enum class CopyPath : uint8_t {
  kBulk = 0,       // Hopper TMA: cp.async.bulk global -> shared (mbarrier pipeline), then bulk
                   // stores shared -> each member; a few threads keep many slices in flight
  kRegisters = 1,  // each warp loads a slice into registers and stores it to every member
};

// Device status of one local rank (read after the work completed).
enum class StatusCode : uint32_t {
  kOk = 0,
  kCountTimeout = 1,     // count exchange: `peer` never published `tag` (the epoch)
  kReadyTimeout = 2,     // READY gate: writer `peer` never published generation `tag`
  kFenceTimeout = 3,     // reuse fence: member `peer` never released the bank of generation `tag`
  kCopyFailed = 4,       // writer `peer` published generation `tag` as failed
  kReadyOvertaken = 5,   // writer `peer` is already past generation `tag` (gate ran too late)
  kHostLaneTimeout = 6,  // host lane: owner `peer` never staged (or staged as failed) generation
                         // `tag`; the member publishes READY `tag` as failed
  kCountOvertaken = 7,   // count exchange: `peer` is already past epoch `tag` (this rank ran
                         // late, after a timeout); the matrix is not that epoch's
  kGateEarly = 8,        // kDeviceGeneration gate/release ran before its replicate: generation
                         // `tag` was already gated/released (nothing validated/released)
};

}  // namespace iser

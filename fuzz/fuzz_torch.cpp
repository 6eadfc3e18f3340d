// libFuzzer target: iser::parse_torch_trace (torch.save zip + restricted pickle; docs/fuzzing.md).
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return iser::fuzz::run(data, size, [](std::string_view input, const iser::TraceOptions& o) {
    return iser::parse_torch_trace(input, "fuzz-input", o);
  });
}

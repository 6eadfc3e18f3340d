// libFuzzer target: the restricted pickle reader and the dump schemas behind it
// (docs/fuzzing.md). A zip container with valid CRCs is built around the input so that mutations
// reach the pickle instead of failing the container's checks: after the option byte, 4 bytes
// give the pickle's length N, then N bytes of pickle; the rest is the data of every storage key
// "0".."15".
#include <string>
#include <utility>
#include <vector>

#include "core/trace/zip.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return iser::fuzz::run(data, size, [](std::string_view input, const iser::TraceOptions& o) {
    if (input.size() < 4) throw iser::Error("short input");
    size_t n = 0;
    for (int i = 3; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(input[static_cast<size_t>(i)]);
    input.remove_prefix(4);
    if (n > input.size()) n = input.size();
    std::vector<std::pair<std::string, std::string>> entries;
    entries.emplace_back("archive/data.pkl", std::string(input.substr(0, n)));
    const std::string blob(input.substr(n));
    for (int key = 0; key < 16; ++key)
      entries.emplace_back("archive/data/" + std::to_string(key), blob);
    entries.emplace_back("archive/byteorder", "little");
    const std::string file = iser::trace::write_stored_zip(entries);
    return iser::parse_torch_trace(file, "fuzz-input", o);
  });
}

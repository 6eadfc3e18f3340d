// A strict reader of the zip archives that torch.save writes: entries stored without compression
// (method 0), listed in the central directory. Every offset and size is checked against the
// buffer, names must be unique, and each entry's CRC-32 must match; nothing outside the given
// bytes is read.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace iser::trace {

// Entry name -> its bytes. NOTE: the views point into `bytes`; keep them alive while used.
std::map<std::string, std::string_view> read_stored_zip(std::string_view bytes,
                                                        std::string_view name);

// True when the bytes start like a zip archive (a local file header).
bool looks_like_zip(std::string_view head);

uint32_t crc32(std::string_view data);

// The inverse, for tests and fuzz harnesses: entries stored uncompressed, in the given order.
std::string write_stored_zip(const std::vector<std::pair<std::string, std::string>>& entries);

}  // namespace iser::trace

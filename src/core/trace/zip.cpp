#include "zip.h"

#include <array>
#include <cstdint>
#include <cstring>

#include "iser/error.h"

namespace iser::trace {
namespace {

constexpr uint32_t kLocalHeaderSig = 0x04034b50;
constexpr uint32_t kCentralHeaderSig = 0x02014b50;
constexpr uint32_t kEndOfCentralDirSig = 0x06054b50;
constexpr size_t kEndOfCentralDirSize = 22;
constexpr size_t kCentralHeaderSize = 46;
constexpr size_t kLocalHeaderSize = 30;
constexpr size_t kMaxEntries = 1 << 16;

uint32_t load_le(std::string_view bytes, size_t pos, int width) {
  uint32_t v = 0;
  for (int i = width - 1; i >= 0; --i) {
    v = (v << 8) | static_cast<uint8_t>(bytes[pos + static_cast<size_t>(i)]);
  }
  return v;
}

const std::array<uint32_t, 256>& crc_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

void store_le(std::string& out, uint32_t v, int width) {
  for (int i = 0; i < width; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

// The fields from "version needed" to "extra length", alike in local and central headers.
void store_shared_fields(std::string& out, uint32_t crc, uint32_t size, size_t name_len) {
  store_le(out, 20, 2);  // version needed
  store_le(out, 0, 2);   // flags
  store_le(out, 0, 2);   // method: stored
  store_le(out, 0, 4);   // time, date
  store_le(out, crc, 4);
  store_le(out, size, 4);  // compressed
  store_le(out, size, 4);  // uncompressed
  store_le(out, static_cast<uint32_t>(name_len), 2);
  store_le(out, 0, 2);  // extra length
}

}  // namespace

uint32_t crc32(std::string_view data) {
  const auto& table = crc_table();
  uint32_t c = 0xFFFFFFFFu;
  for (const char ch : data) c = table[(c ^ static_cast<uint8_t>(ch)) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

std::string write_stored_zip(const std::vector<std::pair<std::string, std::string>>& entries) {
  std::string out;
  std::string directory;
  for (const auto& [entry, data] : entries) {
    ISER_CHECK(entry.size() <= 0xFFFF && data.size() <= 0xFFFFFFFFu && out.size() <= 0xFFFFFFFFu,
               "zip entry '{}' too large", entry);
    const auto offset = static_cast<uint32_t>(out.size());
    const uint32_t crc = crc32(data);
    const auto size = static_cast<uint32_t>(data.size());
    store_le(out, kLocalHeaderSig, 4);
    store_shared_fields(out, crc, size, entry.size());
    out += entry;
    out += data;
    store_le(directory, kCentralHeaderSig, 4);
    store_le(directory, 20, 2);  // made by
    store_shared_fields(directory, crc, size, entry.size());
    store_le(directory, 0, 2);  // comment
    store_le(directory, 0, 2);  // disk
    store_le(directory, 0, 2);  // internal attributes
    store_le(directory, 0, 4);  // external attributes
    store_le(directory, offset, 4);
    directory += entry;
  }
  const auto cd_offset = static_cast<uint32_t>(out.size());
  out += directory;
  store_le(out, kEndOfCentralDirSig, 4);
  store_le(out, 0, 2);
  store_le(out, 0, 2);
  store_le(out, static_cast<uint32_t>(entries.size()), 2);
  store_le(out, static_cast<uint32_t>(entries.size()), 2);
  store_le(out, static_cast<uint32_t>(directory.size()), 4);
  store_le(out, cd_offset, 4);
  store_le(out, 0, 2);  // comment
  return out;
}

bool looks_like_zip(std::string_view head) {
  return head.size() >= 4 && load_le(head, 0, 4) == kLocalHeaderSig;
}

std::map<std::string, std::string_view> read_stored_zip(std::string_view bytes,
                                                        std::string_view name) {
  ISER_CHECK(bytes.size() >= kEndOfCentralDirSize, "{}: {} bytes, too short for a zip archive",
             name, bytes.size());
  // The end-of-central-directory record is the last 22 bytes plus an optional comment (< 64 KiB).
  size_t eocd = std::string_view::npos;
  const size_t lowest = bytes.size() > kEndOfCentralDirSize + 0xFFFF
                            ? bytes.size() - kEndOfCentralDirSize - 0xFFFF
                            : 0;
  for (size_t pos = bytes.size() - kEndOfCentralDirSize + 1; pos-- > lowest;) {
    if (load_le(bytes, pos, 4) == kEndOfCentralDirSig &&
        pos + kEndOfCentralDirSize + load_le(bytes, pos + 20, 2) == bytes.size()) {
      eocd = pos;
      break;
    }
  }
  ISER_CHECK(eocd != std::string_view::npos, "{}: no zip end-of-central-directory record", name);
  const uint32_t disk = load_le(bytes, eocd + 4, 2);
  const uint32_t cd_disk = load_le(bytes, eocd + 6, 2);
  const uint32_t entries_here = load_le(bytes, eocd + 8, 2);
  const uint32_t entries = load_le(bytes, eocd + 10, 2);
  const uint64_t cd_size = load_le(bytes, eocd + 12, 4);
  const uint64_t cd_offset = load_le(bytes, eocd + 16, 4);
  ISER_CHECK(disk == 0 && cd_disk == 0 && entries_here == entries,
             "{}: multi-disk zip archives are not supported", name);
  ISER_CHECK(entries != 0xFFFF && cd_size != 0xFFFFFFFFu && cd_offset != 0xFFFFFFFFu,
             "{}: a zip64 archive (over 4 GiB or 65535 entries) is not supported", name);
  ISER_CHECK(cd_offset <= eocd && cd_size <= eocd - cd_offset,
             "{}: zip central directory [{}, +{}) lies outside the {} bytes before its end record",
             name, cd_offset, cd_size, eocd);
  ISER_CHECK(entries <= kMaxEntries, "{}: {} zip entries", name, entries);

  std::map<std::string, std::string_view> out;
  size_t pos = static_cast<size_t>(cd_offset);
  const size_t cd_end = static_cast<size_t>(cd_offset + cd_size);
  for (uint32_t i = 0; i < entries; ++i) {
    ISER_CHECK(pos + kCentralHeaderSize <= cd_end && load_le(bytes, pos, 4) == kCentralHeaderSig,
               "{}: zip central directory entry {} is truncated or malformed", name, i);
    const uint32_t flags = load_le(bytes, pos + 8, 2);
    const uint32_t method = load_le(bytes, pos + 10, 2);
    const uint32_t crc = load_le(bytes, pos + 16, 4);
    const uint64_t packed = load_le(bytes, pos + 20, 4);
    const uint64_t size = load_le(bytes, pos + 24, 4);
    const size_t name_len = load_le(bytes, pos + 28, 2);
    const size_t extra_len = load_le(bytes, pos + 30, 2);
    const size_t comment_len = load_le(bytes, pos + 32, 2);
    const uint64_t local = load_le(bytes, pos + 42, 4);
    const size_t record_end = pos + kCentralHeaderSize + name_len + extra_len + comment_len;
    ISER_CHECK(record_end <= cd_end, "{}: zip central directory entry {} overruns the directory",
               name, i);
    std::string entry(bytes.substr(pos + kCentralHeaderSize, name_len));
    ISER_CHECK((flags & 0x1) == 0, "{}: zip entry '{}' is encrypted", name, entry);
    ISER_CHECK(method == 0 && packed == size,
               "{}: zip entry '{}' is compressed (method {}); torch.save stores entries "
               "uncompressed",
               name, entry, method);
    ISER_CHECK(local + kLocalHeaderSize <= cd_offset && load_le(bytes, local, 4) == kLocalHeaderSig,
               "{}: zip entry '{}' has no local header at offset {}", name, entry, local);
    const size_t data_begin = static_cast<size_t>(local) + kLocalHeaderSize +
                              load_le(bytes, local + 26, 2) + load_le(bytes, local + 28, 2);
    ISER_CHECK(data_begin <= cd_offset && size <= cd_offset - data_begin,
               "{}: zip entry '{}' data [{}, +{}) runs past the central directory", name, entry,
               data_begin, size);
    const std::string_view data = bytes.substr(data_begin, static_cast<size_t>(size));
    ISER_CHECK(crc32(data) == crc, "{}: zip entry '{}' fails its CRC-32 check (corrupt file)", name,
               entry);
    ISER_CHECK(out.emplace(entry, data).second, "{}: zip entry '{}' appears twice", name, entry);
    pos = record_end;
  }
  return out;
}

}  // namespace iser::trace

// Layer ids a file carries (`__metadata__.layers`): read, written back, rejected when malformed,
// and the bundled topic files' ids.
#include <gtest/gtest.h>

#include "iser/trace.h"
#include "trace_test_util.h"

namespace iser {
namespace {

using testing::expect_error;
using testing::le_bytes;
using testing::raw_safetensors;

// Two layers x 2 experts of int32 histograms with the given `layers` metadata value.
std::string histograms_with_layers(const std::string& layers) {
  const std::string header =
      "{\"__metadata__\":{\"num_experts\":\"2\",\"top_k\":\"1\"" +
      (layers.empty() ? std::string() : ",\"layers\":\"" + layers + "\"") +
      "},\"expert_counts\":{\"dtype\":\"I32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}";
  return raw_safetensors(header, le_bytes<int32_t>({1, 2, 3, 4}));
}

TEST(LayerIds, ReadFromMetadataOrImplicit) {
  const auto with = parse_safetensors_trace(histograms_with_layers("[3, 7]"), "f");
  EXPECT_EQ(with.metadata.layer_ids, (std::vector<int>{3, 7}));
  EXPECT_EQ(with.metadata.layer_id(1), 7);
  const auto without = parse_safetensors_trace(histograms_with_layers(""), "f");
  EXPECT_TRUE(without.metadata.layer_ids.empty());
  EXPECT_EQ(without.metadata.layer_id(1), 1);
}

TEST(LayerIds, MalformedMetadataIsAClearError) {
  expect_error([] { parse_safetensors_trace(histograms_with_layers("3, 7"), "f.st"); },
               {"f.st", "__metadata__.layers", "3, 7"});
  expect_error([] { parse_safetensors_trace(histograms_with_layers("[3]"), "f.st"); },
               {"names 1 layers", "L = 2"});
  expect_error([] { parse_safetensors_trace(histograms_with_layers("[7, 3]"), "f.st"); },
               {"ascending", "3 after 7"});
  expect_error([] { parse_safetensors_trace(histograms_with_layers("[1, -2]"), "f.st"); },
               {"-2", "layer id"});
}

TEST(LayerIds, WrittenBackByTheCanonicalWriter) {
  auto data = parse_safetensors_trace(histograms_with_layers("[5, 40]"), "f");
  const auto again = parse_safetensors_trace(serialize_trace(data), "g");
  EXPECT_EQ(again.metadata.layer_ids, (std::vector<int>{5, 40}));
  data.metadata.layer_ids = {9, 9};
  expect_error([&] { serialize_trace(data); }, {"ascending and distinct"});
}

TEST(LayerIds, BundledTopicsCarryTheirModelLayers) {
  const auto topics = bundled_drift_topics();
  ASSERT_EQ(topics.size(), 3u);
  EXPECT_TRUE(read_trace_data(topics[0]).metadata.layer_ids.empty());  // coding: rows 0..39
  for (size_t t = 1; t < topics.size(); ++t) {
    const auto m = read_trace_data(topics[t]).metadata;
    EXPECT_EQ(m.layer_ids, (std::vector<int>{3, 7, 11, 15, 19, 23, 27, 31, 35, 39})) << t;
    EXPECT_EQ(m.model, "DeepSeek-V4.1-Flash");
  }
}

}  // namespace
}  // namespace iser

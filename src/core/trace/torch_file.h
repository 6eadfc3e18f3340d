// Files written by torch.save (the zip container of PyTorch >= 1.6): the restricted pickle of
// data.pkl plus tensor data read from the archive's data/<key> entries, with every size checked.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "pickle.h"

namespace iser::trace {

// NOTE: refers to the caller's bytes; keep them alive while the file is used.
struct TorchFile {
  std::string name;  // for messages
  std::map<std::string, std::string_view> entries;
  std::string prefix;  // "<archive>/": the folder holding data.pkl and data/
  Pickle pickle;

  const PyObject& root() const { return pickle.at(pickle.root); }
  const PyObject& at(uint32_t idx) const { return pickle.at(idx); }
  // An integer tensor's elements in row-major order, widened to int64 (floats and bools throw;
  // `what` names the tensor in messages).
  std::vector<int64_t> read_integers(const PyObject& tensor, std::string_view what) const;
};

TorchFile read_torch_file(std::string_view bytes, std::string_view name);

std::string shape_text(const std::vector<int64_t>& shape);

}  // namespace iser::trace

// Flags of bench_replicate (nccl-tests style pairs `-f value`; bench_replicate.cu says what runs):
// -b/-e/-f sizes, -w warm-up, -n iterations, -c check (1/0), -G graph (1/0: also time
// ncclBroadcast and the SM transports captured in a CUDA graph), -J JSON file, -t transports
// (comma list of p2p-direct,p2p-sami,p2p-sami-owner,p2p-sami-host,copy-engine,nccl), -s copy-SM
// list (per
// GPU), -g ranks, -x sections (comma list of bundles,sweep,latency), -N bundle counts (comma
// list), -B helper banks (1/2), -V copy shapes of the SM transports (comma list of bulk[:WxS] /
// registers[:W]: path, warps per CTA, 8-KiB stages per warp; default bulk,registers), -O owner
// placements (list of out, in, split; both = out,in, the default; split: owner outside, bundles
// alternately pushed by the owner and pulled by the receivers, transport plan, >= 2 bundles),
// -H host shares of p2p-sami-host (comma list of fractions of each bundle's slices; default
// kMeasuredHostShare), -L host-lane CTAs per GPU of p2p-sami-host (comma list; default
// kDefaultHostSms; they run beside the -s copy CTAs and the sms column counts both), -K host-lane
// paths of p2p-sami-host (comma list of bulk, registers; default bulk; registers rows are tagged
// "/reg"; bulk takes effect with bulk copy shapes only), -M peer memories of the runtime
// transports (comma list of auto, nccl, ipc; default auto; with more than one, every runtime row
// runs once per peer memory, its section tagged "@nccl" / "@ipc", side by side in one run).
#pragma once

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "iser/runtime.h"

namespace bench_replicate {

struct Options {
  int64_t min_bytes = 1 << 20;
  int64_t max_bytes = int64_t{512} << 20;
  int64_t factor = 2;
  int warmup = 5;
  int iters = 20;
  int check = 1;
  int graph = 1;
  std::string json;
  std::vector<std::string> transports = {"p2p-direct", "p2p-sami", "copy-engine", "nccl"};
  std::vector<int> sms = {1, 2, 4, 8, 16};
  int ranks = 2;
  std::vector<std::string> sections = {"bundles", "sweep", "latency"};
  std::vector<int> bundle_counts = {1, 4, 8};
  int banks = 1;
  std::vector<std::string> shapes = {"bulk", "registers"};
  std::vector<std::string> owners = {"out", "in"};
  std::vector<double> host_shares = {iser::kMeasuredHostShare};
  std::vector<int> host_sms = {iser::kDefaultHostSms};
  std::vector<std::string> host_paths = {"bulk"};
  std::vector<std::string> peer_memories = {"auto"};
};

struct Shape {
  iser::CopyPath path = iser::CopyPath::kBulk;
  int warps = 0;
  int stages = 0;
};

// "bulk", "bulk:4x5", "registers", "registers:16".
Shape parse_shape(const std::string& s) {
  Shape shape;
  const size_t colon = s.find(':');
  const std::string path = s.substr(0, colon);
  if (path == "bulk") {
    shape.path = iser::CopyPath::kBulk;
  } else if (path == "registers") {
    shape.path = iser::CopyPath::kRegisters;
  } else {
    std::fprintf(stderr, "unknown copy shape %s (bulk[:WxS], registers[:W])\n", s.c_str());
    std::exit(1);
  }
  if (colon != std::string::npos) {
    shape.warps = std::atoi(s.c_str() + colon + 1);
    const size_t x = s.find('x', colon);
    if (x != std::string::npos) shape.stages = std::atoi(s.c_str() + x + 1);
  }
  return shape;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (begin <= s.size()) {
    const size_t end = s.find(',', begin);
    out.push_back(s.substr(begin, end == std::string::npos ? std::string::npos : end - begin));
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  return out;
}

int64_t parse_size(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  const char unit = end && *end ? static_cast<char>(std::toupper(*end)) : ' ';
  if (unit == 'K') v *= 1024;
  if (unit == 'M') v *= 1024 * 1024;
  if (unit == 'G') v *= 1024.0 * 1024 * 1024;
  return static_cast<int64_t>(v);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "-b")
      o.min_bytes = parse_size(value);
    else if (flag == "-e")
      o.max_bytes = parse_size(value);
    else if (flag == "-f")
      o.factor = std::max<int64_t>(2, std::atoll(value.c_str()));
    else if (flag == "-w")
      o.warmup = std::atoi(value.c_str());
    else if (flag == "-n")
      o.iters = std::max(1, std::atoi(value.c_str()));
    else if (flag == "-c")
      o.check = std::atoi(value.c_str());
    else if (flag == "-G")
      o.graph = std::atoi(value.c_str());
    else if (flag == "-J")
      o.json = value;
    else if (flag == "-t")
      o.transports = split(value);
    else if (flag == "-g")
      o.ranks = std::atoi(value.c_str());
    else if (flag == "-x")
      o.sections = split(value);
    else if (flag == "-V")
      o.shapes = split(value);
    else if (flag == "-B")
      o.banks = std::atoi(value.c_str());
    else if (flag == "-O")
      o.owners = value == "both" ? std::vector<std::string>{"out", "in"} : split(value);
    else if (flag == "-N") {
      o.bundle_counts.clear();
      for (const auto& s : split(value)) o.bundle_counts.push_back(std::atoi(s.c_str()));
    } else if (flag == "-H") {
      o.host_shares.clear();
      for (const auto& s : split(value)) o.host_shares.push_back(std::atof(s.c_str()));
    } else if (flag == "-L") {
      o.host_sms.clear();
      for (const auto& s : split(value)) o.host_sms.push_back(std::atoi(s.c_str()));
    } else if (flag == "-K") {
      o.host_paths = split(value);
    } else if (flag == "-M") {
      o.peer_memories = split(value);
    } else if (flag == "-s") {
      o.sms.clear();
      for (const auto& s : split(value)) o.sms.push_back(std::atoi(s.c_str()));
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      std::exit(1);
    }
  }
  if (argc % 2 == 0) {
    std::fprintf(stderr, "flag %s needs a value\n", argv[argc - 1]);
    std::exit(1);
  }
  for (const std::string& owner : o.owners) {
    if (owner != "out" && owner != "in" && owner != "split") {
      std::fprintf(stderr, "-O %s: owner placement must be out, in, split or both\n",
                   owner.c_str());
      std::exit(1);
    }
  }
  for (double share : o.host_shares) {
    if (!(share > 0.0 && share <= 1.0)) {
      std::fprintf(stderr, "-H %g: host shares must be in (0, 1]\n", share);
      std::exit(1);
    }
  }
  for (int n : o.host_sms) {
    if (n < 1 || n > 64) {
      std::fprintf(stderr, "-L %d: host-lane CTAs must be in [1, 64]\n", n);
      std::exit(1);
    }
  }
  for (const std::string& path : o.host_paths) {
    if (path != "bulk" && path != "registers") {
      std::fprintf(stderr, "-K %s: host-lane paths are bulk and registers\n", path.c_str());
      std::exit(1);
    }
  }
  for (const std::string& m : o.peer_memories) {
    if (m != "auto" && m != "nccl" && m != "ipc") {
      std::fprintf(stderr, "-M %s: peer memories are auto, nccl and ipc\n", m.c_str());
      std::exit(1);
    }
  }
  if (o.ranks < 2) {
    std::fprintf(stderr, "-g %d: needs at least 2 ranks\n", o.ranks);
    std::exit(1);
  }
  return o;
}

bool has(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

}  // namespace bench_replicate

#include "engine/layer_split.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

#include "util/error.h"
#ifdef HS_HAVE_CUDA
#include "kernels/cuda/device_context.h"
#endif

namespace hs {

namespace {

std::string list(const std::vector<double>& v) {
  std::ostringstream s;
  for (size_t i = 0; i < v.size(); ++i) s << (i ? "," : "") << v[i];
  return s.str();
}

}  // namespace

std::vector<int> split_layers(const std::vector<double>& shares, int n_layers, const std::string& what) {
  const int n = static_cast<int>(shares.size());
  HS_CHECK(n > 0, what, ": no shards");
  HS_CHECK(n <= n_layers, what, ": ", n, " shards for ", n_layers, " layers: every shard needs at least one layer");
  double total = 0;
  bool whole = true;
  for (double s : shares) {
    HS_CHECK(std::isfinite(s) && s > 0, what, " ", list(shares), ": every share must be positive");
    total += s;
    whole &= s == std::floor(s);
  }
  std::vector<int> out(static_cast<size_t>(n));
  if (whole && total == n_layers) {
    for (int i = 0; i < n; ++i) out[static_cast<size_t>(i)] = static_cast<int>(shares[static_cast<size_t>(i)]);
    return out;
  }
  // In proportion: the floor of each exact share (at least one layer), then single layers to
  // the largest remainders (ties to the later shard: the first holds the embedding) or away
  // from the shards furthest above their share.
  std::vector<double> exact(static_cast<size_t>(n));
  int given = 0;
  for (int i = 0; i < n; ++i) {
    const size_t k = static_cast<size_t>(i);
    exact[k] = n_layers * shares[k] / total;
    out[k] = std::max(1, static_cast<int>(std::floor(exact[k])));
    given += out[k];
  }
  while (given != n_layers) {
    int best = -1;
    double best_gap = 0;
    for (int i = n - 1; i >= 0; --i) {
      const size_t k = static_cast<size_t>(i);
      const double gap = given < n_layers ? exact[k] - out[k] : out[k] - exact[k];
      if ((given > n_layers && out[k] <= 1) || (best >= 0 && gap <= best_gap)) continue;
      best = i;
      best_gap = gap;
    }
    HS_CHECK(best >= 0, "internal: cannot split ", n_layers, " layers over ", list(shares));
    out[static_cast<size_t>(best)] += given < n_layers ? 1 : -1;
    given += given < n_layers ? 1 : -1;
  }
  return out;
}

uint64_t device_free_bytes(const std::string& device) {
  if (device == "cpu") {
    const long pages = sysconf(_SC_AVPHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(size) : 1;
  }
  HS_CHECK(device.rfind("cuda:", 0) == 0, "unknown device '", device, "' (expected cpu or cuda:N)");
#ifdef HS_HAVE_CUDA
  const int id = std::stoi(device.substr(5));
  HS_CHECK(id >= 0 && id < cuda::device_count(), "device ", device, " does not exist (", cuda::device_count(),
           " CUDA device(s) found)");
  cuda::DeviceGuard g(id);
  size_t free_b = 0, total_b = 0;
  HS_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return free_b;
#else
  fail("device '", device, "': this build has no CUDA backend");
#endif
}

std::vector<double> free_memory_shares(const std::vector<std::string>& devices) {
  std::vector<double> out;
  for (const auto& d : devices) {
    const auto uses = std::count(devices.begin(), devices.end(), d);
    out.push_back(static_cast<double>(device_free_bytes(d)) / static_cast<double>(uses));
  }
  return out;
}

}  // namespace hs

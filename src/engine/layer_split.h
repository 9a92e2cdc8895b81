// How a model's layers are divided among shards (design.md §5): relative shares, or exact
// per-shard layer counts when the values sum to the layer count.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace hs {

// Layers per shard. Shares that are whole numbers summing to n_layers are taken as the layer
// counts; any other positive shares divide n_layers in proportion (largest remainders, ties to
// the later shard), with at least one layer per shard. `what` names the option in errors.
std::vector<int> split_layers(const std::vector<double>& shares, int n_layers, const std::string& what);

// Bytes free for weights on a device: "cpu" = available RAM, "cuda:N" = the GPU's free memory.
// Throws for an unknown device or a CUDA device in a build without CUDA.
uint64_t device_free_bytes(const std::string& device);

// The default shares of an engine over these devices: each device's free memory, divided
// equally among the shards that name the same device.
std::vector<double> free_memory_shares(const std::vector<std::string>& devices);

}  // namespace hs

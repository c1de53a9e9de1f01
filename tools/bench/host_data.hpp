#pragma once

// Random host data for every slot of a node (never zeros: zeros hide
// unwritten outputs and can run faster than real data), and the typed reads
// the float64 reference needs.

#include "node.hpp"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace nbits::bench {

// splitmix64: fast enough to fill hundreds of MiB per shape, and seedable so
// that a failing shape can be reproduced with --seed.
class Rng {
public:
    explicit Rng(std::uint64_t seed) : state_(seed) {}
    std::uint64_t next()
    {
        std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    // Uniform in [low, high).
    double uniform(double low, double high)
    {
        return low + (high - low) * static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0);
    }
    void fill_bytes(std::uint8_t* data, std::size_t count);

private:
    std::uint64_t state_;
};

// Element `index` of fp16 or fp32 data, widened: how host inputs and device
// outputs are read back alike.
double load_float(const std::uint8_t* data, DataType dtype, std::size_t index);

// Fresh per shape: the run's seed mixed with the shape, so that two shapes
// never share data and one shape reproduces under the same --seed.
std::uint64_t shape_seed(std::uint64_t run_seed, const BenchShape& shape);

class HostData {
public:
    HostData(const Node& node, std::uint64_t seed);

    const Node& node() const { return node_; }
    // The bytes of input slot `index`, empty for an empty slot.
    const std::vector<std::uint8_t>& bytes(std::size_t index) const { return bytes_[index]; }
    // The slot holding `role` (of `projection`), or -1 when the node has none.
    int find(Role role, int projection = 0) const;

    // Element `index` of a floating-point slot, as stored (fp16 or fp32).
    double value(int slot, std::size_t index) const;
    // Dequantized weight (code - zero point) * scale at (column, depth).
    double weight(int projection, std::size_t column, std::size_t depth) const;

private:
    Node node_;
    std::vector<std::vector<std::uint8_t>> bytes_;
};

}  // namespace nbits::bench

#pragma once

// What one nbits-bench invocation was asked to do.

#include "shapes.hpp"

#include "nbits/tensor.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace nbits::bench {

enum class BiasMode { None, Plain, Folded };
enum class OutputFormat { Table, Json, Csv };

// The MatMulNBits path every shape of the run takes: the dtypes, the
// quantization layout and the fusions an engine's graph optimizer would mark.
struct PathConfig {
    DataType activation = DataType::Float16;
    DataType scales = DataType::Float16;
    int bits = 4;
    int block_size = 32;
    bool zero_points = false;
    int accuracy_level = 0;
    BiasMode bias = BiasMode::None;
    bool rmsnorm_prologue = false;
    float rmsnorm_epsilon = 1e-5f;

    // "act=f16 scales=f16 int4 block=32 symmetric acc=0"
    std::string describe() const;
};

const char* to_string(BiasMode mode);

struct BenchOptions {
    PathConfig path;

    std::vector<std::string> models;
    std::vector<Projection> projections;
    std::optional<std::size_t> m;
    std::vector<std::string> shape_specs;  // --shape, parsed once --m is known
    bool quick = false;

    int warmups = 2;
    std::optional<int> repeats;      // default: 5 graph replays (decode), 10 runs (prefill)
    int min_graph_launches = 20;
    std::size_t max_weight_bytes = std::size_t{8} << 30;  // all rotated copies of one shape together
    std::optional<std::uint64_t> seed;
    int device = 0;
    bool cublas = true;

    OutputFormat format = OutputFormat::Table;
    std::string out_path;

    bool help = false;
    bool list = false;
    bool plan_only = false;

    int decode_repeats() const { return repeats.value_or(5); }
    int prefill_repeats() const { return repeats.value_or(10); }
    // The shapes the options select, in run order.
    std::vector<BenchShape> shapes() const;
};

// Throws tools::UsageError with a message for the user.
BenchOptions parse_options(int argc, char** argv);
std::string help_text();

}  // namespace nbits::bench

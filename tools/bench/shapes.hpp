#pragma once

// The shapes nbits-bench measures: the projections of real models, the
// default set that mirrors shared/docs/MEASURED.md, and user-given K,N[,M].

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace nbits::bench {

// GateUp is the paired node (two K x intermediate weights, SwiGLU output);
// GateUpUnpaired one node of N = 2 x intermediate; Up one unfused gate or up
// projection, N = intermediate (the prefill shape of MEASURED.md).
enum class Projection { Qkv, O, GateUp, GateUpUnpaired, Up, Down, LmHead, Custom };

// "gateup_unpaired"; the spelling --proj accepts.
const char* to_string(Projection projection);
// Throws std::invalid_argument listing the accepted names.
Projection parse_projection(std::string_view name);

struct ModelDims {
    const char* name;
    std::size_t hidden;
    std::size_t intermediate;
    std::size_t qkv;  // fused q, k and v output columns
    std::size_t vocab;
};

const std::vector<ModelDims>& known_models();
// Case-insensitive; throws std::invalid_argument listing the known models.
const ModelDims& find_model(std::string_view name);

// One MatMulNBits node to measure. `n` is the node's N attribute: for the
// paired gate/up node that is the intermediate size, and the node reads two
// K x N weights.
struct BenchShape {
    std::string model;  // a known model's name, or "custom"
    Projection projection = Projection::Custom;
    std::size_t m = 1;
    std::size_t k = 0;
    std::size_t n = 0;

    bool paired() const { return projection == Projection::GateUp; }
    // Weight columns the node reads: 2N for the paired gate/up node.
    std::size_t weight_columns() const { return paired() ? 2 * n : n; }
    bool decode() const { return m == 1; }
    // "Llama-3-8B gateup"
    std::string label() const;
};

BenchShape model_shape(const ModelDims& model, Projection projection, std::size_t m);

// `K,N[,M]`, optionally prefixed by a projection kind (`gateup:4096,14336`
// benchmarks the paired node with N = intermediate). Throws std::invalid_argument.
BenchShape parse_shape(std::string_view spec, std::size_t default_m);

// Decode M=1 for every model x {qkv, o, gateup, down}, Llama-3-8B lm_head,
// then the prefill rows of MEASURED.md (M, K, N exactly as measured there).
std::vector<BenchShape> default_shapes();
// A handful of shapes that touch every kind of launch: a smoke run.
std::vector<BenchShape> quick_shapes();
// The projections a --model selection runs when --proj is not given.
std::vector<Projection> default_projections();

// The --list text: every model's projections and the two built-in sets.
std::string describe_shape_sets();

}  // namespace nbits::bench

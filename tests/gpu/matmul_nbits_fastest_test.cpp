// KernelPolicy::Fastest against the float64 oracle: every feature combination
// of nbits' own kernels (fp16 and bf16 activations, int4 and int8, block sizes
// 16 to 512, zero points, fp32 scales, plain, folded and per-token bias, the
// RMS-norm prologue, the paired gate/up node) at decode and prefill sizes,
// with the original's bounds (bf16: 2e-2 of the output's scale). Every output
// element must be written.

#include "matmul_fixture.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>

using namespace nbits;
using namespace nbits::test;

namespace {

enum class Bias { None, Plain, Folded, PerToken };

struct FastestCase {
    DataType activation = DataType::Float16;
    std::size_t m = 1;
    std::size_t k = 512;
    std::size_t n = 160;
    std::size_t bits = 4;
    std::size_t block_size = 32;
    bool zero_points = false;
    bool f32_scales = false;
    Bias bias = Bias::None;
    std::optional<DataType> gamma;
    bool gate_up = false;

    std::string describe() const
    {
        return fmt::format("{} M={} K={} N={} int{} block={}{}{}{}{}{}", to_string(activation), m, k, n, bits,
                           block_size, zero_points ? " zp" : "", f32_scales ? " f32-scales" : "",
                           bias == Bias::Plain ? " bias" : bias == Bias::Folded ? " folded-bias"
                                                         : bias == Bias::PerToken ? " per-token-bias"
                                                                                  : "",
                           gamma ? fmt::format(" rmsnorm({})", to_string(*gamma)) : "", gate_up ? " gate/up" : "");
    }
};

// One node of the given features (N and K: a whole tile or not, as asked).
FastestCase feature_case(DataType activation, std::size_t m, std::size_t bits, std::size_t block_size, bool zp,
                         Bias bias, bool gamma, bool gate_up, std::size_t n, std::size_t k = 512)
{
    FastestCase c;
    c.activation = activation;
    c.m = m;
    c.k = k;
    c.n = n;
    c.bits = bits;
    c.block_size = block_size;
    c.zero_points = zp;
    c.bias = bias;
    c.gamma = gamma ? std::optional<DataType>(activation) : std::nullopt;
    c.gate_up = gate_up;
    return c;
}

// Every M class (decode 1..16, fused prefill 17..128, dequantise + cuBLASLt
// beyond) crossed with a rotation of the layouts, so that each layout feature
// meets each M class and both activation types.
std::vector<FastestCase> cases()
{
    std::vector<FastestCase> all;
    const std::size_t ms[] = {1, 2, 5, 8, 16, 17, 33, 64, 100, 129, 300};
    int rotation = 0;
    for (const DataType activation : {DataType::Float16, DataType::BFloat16}) {
        for (const std::size_t m : ms) {
            for (int layout = 0; layout < 8; ++layout, ++rotation) {
                FastestCase c;
                c.activation = activation;
                c.m = m;
                c.bits = rotation % 3 == 2 ? 8 : 4;
                const std::size_t blocks[] = {32, 128, 16, 64, 256, 512};
                c.block_size = blocks[rotation % 6];
                c.zero_points = rotation % 2 == 1;
                c.f32_scales = rotation % 5 == 3;
                // The bias mode moves by three with each M, so that every mode meets each layout (by the rotation
                // alone it would follow the layout, per-token only on the paired layouts, which drop the bias).
                c.bias = static_cast<Bias>((rotation + 3 * (rotation / 8)) % 4);
                // K and N tails: K not a multiple of the block or of 8, N not a multiple of 8 (also for the paired
                // node, whose SwiGLU pass then walks rows that are not 16-byte aligned).
                c.k = layout == 5 ? 1000 : layout == 6 ? 1003 : 512;
                c.n = layout == 4 || layout == 7 ? 157 : 160;
                if (layout == 2) {
                    c.gamma = rotation % 3 == 0 ? DataType::Float32 : activation;
                }
                if (layout == 3 || layout == 7) {
                    c.gate_up = true;
                    c.bias = Bias::None;
                    c.f32_scales = false;
                    c.gamma = layout == 7 ? std::optional<DataType>(activation) : std::nullopt;
                }
                all.push_back(c);
            }
        }
    }
    // fp32 activations: the decode kernel on CUDA cores (prefill keeps the original's paths).
    for (const std::size_t m : {1, 3, 16}) {
        for (int layout = 0; layout < 4; ++layout, ++rotation) {
            FastestCase c;
            c.activation = DataType::Float32;
            c.m = m;
            c.bits = layout % 2 == 1 ? 8 : 4;
            c.block_size = layout == 2 ? 128 : layout == 3 ? 16 : 32;
            c.zero_points = rotation % 2 == 0;
            c.bias = layout == 1 ? Bias::Plain : Bias::None;
            c.k = layout == 3 ? 1000 : 512;
            all.push_back(c);
        }
    }
    return all;
}

std::vector<float> random_values(Lcg& lcg, std::size_t count, float low, float high)
{
    std::vector<float> values(count);
    for (float& value : values) {
        value = low + (high - low) * lcg.unit();
    }
    return values;
}

QuantizedWeights random_weights(Lcg& lcg, const FastestCase& c, DataType scale_type)
{
    QuantizedWeights w;
    w.k = c.k;
    w.n = c.n;
    w.bits = c.bits;
    w.block_size = c.block_size;
    w.packed = lcg.codes(c.n * w.k_blocks() * w.blob_size(), 255);
    // The scales the kernel reads: rounded to their stored dtype.
    w.scales = stored_values(scale_type, random_values(lcg, c.n * w.k_blocks(), 0.015f, 0.025f));
    if (c.zero_points) {
        // int4: any nibble; int8: the original tests' asymmetric zero points, 96..160.
        w.zero_points = c.bits == 8 ? lcg.int8_zero_points(c.n * w.k_blocks()) : lcg.codes(c.n * w.zp_row_bytes(), 255);
    }
    return w;
}

// Rescales the weights' scales so that the projection's largest output is
// about 4, as in a real layer (and within fp16's range after the gate/up
// product): the original's generator draws scales independent of K, so
// without this the outputs grow with sqrt(K) and the codes' spread.
void normalize_scales(QuantizedWeights& w, const std::vector<float>& a, std::size_t m,
                      const std::vector<float>* gamma, DataType scale_type)
{
    OracleNode node;
    node.activation = &a;
    node.m = m;
    node.weights = &w;
    node.gamma = gamma;
    std::vector<std::size_t> rows(m);
    std::vector<std::size_t> columns(w.n);
    for (std::size_t i = 0; i < rows.size(); ++i) {
        rows[i] = i;
    }
    for (std::size_t i = 0; i < columns.size(); ++i) {
        columns[i] = i;
    }
    float largest = 0.0f;
    for (const float value : oracle_at(node, rows, columns)) {
        largest = std::max(largest, std::fabs(value));
    }
    const float factor = largest > 0.0f ? 4.0f / largest : 1.0f;
    for (float& scale : w.scales) {
        scale *= factor;
    }
    w.scales = stored_values(scale_type, w.scales);
}

struct Outcome {
    OracleError error;
    std::string variant;
    std::uint32_t split_k = 1;  // the most CTAs of a kernel's cluster along z (grid.z)
    bool tma = false;           // a kernel took its tiles by the tensor memory accelerator (an entry *_tma)
    bool stream_k = false;      // the fused GEMM ran as a stream-K grid (an entry *_stream_k)
    std::size_t gemm_launches = 0;  // launches of the fused prefill GEMM (nbits_prefill_gemm*, *_gate_up*)
    std::uint32_t row_tiles = 0;    // token tiles of the fused prefill GEMM's grid (grid.y of its last launch)
};

// One case's node: attributes, host inputs and the float64 expectation.
struct FastestNode {
    FastestCase spec;
    NodeAttributes attributes;
    std::vector<HostTensor> inputs;
    std::vector<float> expected;  // [m, n]
};

// `activation` replaces A's random values (a chain whose A is another node's Y).
FastestNode make_node(const FastestCase& c, std::uint64_t seed, const std::vector<float>* activation = nullptr)
{
    Lcg lcg(seed);
    const DataType t = c.activation;
    const DataType scale_type = c.f32_scales ? DataType::Float32 : t;
    const std::vector<float> drawn = stored_values(t, random_values(lcg, c.m * c.k, -1.0f, 1.0f));
    const std::vector<float>& a = activation != nullptr ? *activation : drawn;
    QuantizedWeights w = random_weights(lcg, c, scale_type);
    QuantizedWeights up = c.gate_up ? random_weights(lcg, c, scale_type) : QuantizedWeights{};
    const std::size_t bias_rows = c.bias == Bias::PerToken ? c.m : 1;
    const std::vector<float> bias =
        c.bias == Bias::None ? std::vector<float>{} : stored_values(t, random_values(lcg, bias_rows * c.n, -1.0f, 1.0f));
    const std::vector<float> gamma = c.gamma ? stored_values(*c.gamma, random_values(lcg, c.k, 0.5f, 1.0f))
                                             : std::vector<float>{};
    normalize_scales(w, a, c.m, c.gamma ? &gamma : nullptr, scale_type);
    if (c.gate_up) {
        normalize_scales(up, a, c.m, c.gamma ? &gamma : nullptr, scale_type);
    }

    FastestNode node;
    node.spec = c;
    node.attributes = matmul_attributes(c.k, c.n, c.bits, c.block_size, 0);
    node.inputs = {HostTensor::real(t, {c.m, c.k}, a), w.packed_tensor(), w.scales_tensor(scale_type)};
    if (c.gate_up) {
        node.attributes.set(ops::kGateUpSwigluAttr, std::int64_t{1});
        node.inputs.push_back(up.packed_tensor());
        node.inputs.push_back(up.scales_tensor(scale_type));
        node.inputs.push_back(c.gamma ? HostTensor::real(*c.gamma, {c.k}, gamma) : HostTensor::absent(t));
        node.inputs.push_back(w.zero_points_tensor());
        node.inputs.push_back(up.zero_points_tensor());
    } else {
        node.inputs.push_back(w.zero_points_tensor());
        node.inputs.push_back(HostTensor::absent(DataType::Int32));
        node.inputs.push_back(c.bias == Bias::None ? HostTensor::absent(t)
                                                   : HostTensor::real(t, {bias_rows * c.n}, bias));
        node.inputs.push_back(c.gamma ? HostTensor::real(*c.gamma, {c.k}, gamma) : HostTensor::absent(t));
    }
    if (c.gamma) {
        node.attributes.set(ops::kRmsNormPrologueAttr, std::int64_t{1});
    }
    if (c.bias == Bias::Folded) {
        node.attributes.set(ops::kFoldedBiasAttr, std::int64_t{1});
    }
    trim_absent_tail(node.inputs);

    std::vector<std::size_t> rows(c.m);
    std::vector<std::size_t> columns(c.n);
    for (std::size_t i = 0; i < rows.size(); ++i) {
        rows[i] = i;
    }
    for (std::size_t i = 0; i < columns.size(); ++i) {
        columns[i] = i;
    }
    OracleNode oracle;
    oracle.activation = &a;
    oracle.m = c.m;
    oracle.weights = &w;
    oracle.up = c.gate_up ? &up : nullptr;
    oracle.gamma = c.gamma ? &gamma : nullptr;
    node.expected = oracle_at(oracle, rows, columns);
    // The bias in float64 terms is a plain add, broadcast or per token.
    for (std::size_t r = 0; r < c.m && !bias.empty(); ++r) {
        for (std::size_t j = 0; j < c.n; ++j) {
            node.expected[r * c.n + j] += bias[(c.bias == Bias::PerToken ? r * c.n : 0) + j];
        }
    }
    return node;
}

// A node for each case, seeded seed, seed + 1, ...
std::vector<FastestNode> make_nodes(const std::vector<FastestCase>& cases, std::uint64_t seed)
{
    std::vector<FastestNode> nodes;
    for (const FastestCase& c : cases) {
        nodes.push_back(make_node(c, seed++));
    }
    return nodes;
}

std::unique_ptr<ops::MatMulNBits> fastest_operator(const FastestNode& node)
{
    return std::make_unique<ops::MatMulNBits>(matmul_gpu_shared(), node.attributes,
                                              MatMulNBitsOptions{KernelPolicy::Fastest});
}

// The plan of the node's Fastest operator for its tensors (throws what planning throws).
ops::LaunchPlan fastest_plan(const FastestNode& node)
{
    std::vector<TensorDesc> inputs;
    for (const HostTensor& host : node.inputs) {
        TensorDesc d;
        d.dtype = host.dtype;
        d.shape = host.shape;
        d.present = host.present;
        inputs.push_back(d);
    }
    TensorDesc output;
    output.dtype = node.spec.activation;
    output.shape = {node.spec.m, node.spec.n};
    return fastest_operator(node)->plan(inputs, {output});
}

// Compiles every kernel the nodes' plans launch on all host cores at once
// (CudaRuntime::prepare), so that the runs that follow only look their
// functions up. A node that cannot be planned or compiled fails in its run.
void compile_in_parallel(const std::vector<FastestNode>& nodes)
{
    std::vector<ops::LaunchPlan> plans;
    for (const FastestNode& node : nodes) {
        try {
            plans.push_back(fastest_plan(node));
        } catch (const nbits::Error&) {
            // The run reports it.
        }
    }
    std::vector<const ops::LaunchPlan*> pointers;
    for (const ops::LaunchPlan& plan : plans) {
        pointers.push_back(&plan);
    }
    try {
        matmul_gpu().prepare(pointers);
    } catch (const nbits::Error&) {
        // The run of the node whose kernel failed reports it.
    }
}

Outcome run_node(const FastestNode& node)
{
    CudaRuntime& runtime = matmul_gpu();
    const FastestCase& c = node.spec;
    const std::unique_ptr<ops::MatMulNBits> op = fastest_operator(node);
    const DeviceTensors device(runtime, node.inputs);
    DeviceOutput output(runtime, c.activation, {c.m, c.n});
    const RunOutcome outcome = run_into(*op, device.tensors(), output);
    Outcome result;
    result.error = oracle_error(output_values(c.activation, outcome.bytes), node.expected);
    result.variant = outcome.plan.variant;
    for (const ops::PlanStep& step : outcome.plan.steps) {
        if (const auto* kernel = std::get_if<ops::KernelStep>(&step)) {
            result.split_k = std::max(result.split_k, kernel->config.grid.z);
            const std::string& entry = kernel->entry;
            result.tma = result.tma || (entry.size() > 4 && entry.compare(entry.size() - 4, 4, "_tma") == 0);
            result.stream_k = result.stream_k || entry.find("_stream_k") != std::string::npos;
            if (entry.rfind("nbits_prefill_g", 0) == 0) {
                ++result.gemm_launches;
                result.row_tiles = kernel->config.grid.y;
            }
        }
    }
    return result;
}

Outcome run_case(const FastestCase& c, std::uint64_t seed) { return run_node(make_node(c, seed)); }

// The run of a node, or a failed check saying why it threw.
std::optional<Outcome> run_or_fail(const FastestNode& node)
{
    try {
        return run_node(node);
    } catch (const nbits::Error& error) {
        FAIL_CHECK("the run failed: " << error.what());
        return std::nullopt;
    }
}

std::optional<Outcome> run_or_fail(const FastestCase& c, std::uint64_t seed) { return run_or_fail(make_node(c, seed)); }

// The original's float64 bounds (bf16: 2e-2 of the output's scale), and no non-finite output.
void check_oracle_bounds(const FastestCase& c, const Outcome& outcome)
{
    CHECK_MESSAGE(outcome.error.all_finite, "a non-finite output");
    if (c.activation == DataType::BFloat16) {
        CHECK(outcome.error.max_abs <= 2e-2f * outcome.error.max_out);
    } else {
        CHECK(within_oracle_bound(outcome.error, c.bits == 8 || c.activation == DataType::Float32 ? 2e-3f : 1e-3f));
    }
}

// Compiles the nodes in parallel, then runs each: its variant must be one `expected` accepts (else the check
// fails with `unexpected`) and its result within the oracle's bounds; `each` also sees every outcome.
void check_nodes(const std::vector<FastestNode>& nodes, bool (*expected)(const std::string& variant),
                 const char* unexpected, const std::function<void(const FastestNode&, const Outcome&)>& each = {})
{
    compile_in_parallel(nodes);
    for (const FastestNode& node : nodes) {
        CAPTURE(node.spec.describe());
        const std::optional<Outcome> ran = run_or_fail(node);
        if (!ran) {
            continue;
        }
        const Outcome& outcome = *ran;
        CAPTURE(outcome.variant);
        CAPTURE(outcome.error.describe());
        CHECK_MESSAGE(expected(outcome.variant), unexpected);
        check_oracle_bounds(node.spec, outcome);
        if (each) {
            each(node, outcome);
        }
    }
}

// Runs a prefill case under the overrides the caller set in the environment: its clusters split K over
// `split_k` CTAs, its variant is `variant` (when given), and it meets the oracle's bounds.
std::optional<Outcome> check_prefill_run(const FastestCase& c, std::uint64_t seed, std::uint32_t split_k,
                                         const char* variant = nullptr)
{
    const std::optional<Outcome> ran = run_or_fail(c, seed);
    if (!ran) {
        return ran;
    }
    const Outcome& outcome = *ran;
    CAPTURE(outcome.variant);
    CAPTURE(outcome.error.describe());
    if (variant != nullptr) {
        CHECK(outcome.variant == variant);
    }
    CHECK(outcome.split_k == split_k);
    check_oracle_bounds(c, outcome);
    return ran;
}

}  // namespace

namespace {

// The feature combinations of cases() whose activations are one of `activations` against the float64 oracle,
// every node on one of nbits' own kernels but where Fastest keeps the original's down-projection GEMV, which
// measured faster; the worst error goes to the test's messages. Node i of cases() takes seed + i whichever test
// it falls in, so each node's data is the same as one test of them all would make.
void check_every_feature(const std::vector<DataType>& activations)
{
    std::vector<FastestNode> nodes;
    std::uint64_t seed = 0xfa57000000000000ull;
    for (const FastestCase& c : cases()) {
        if (std::find(activations.begin(), activations.end(), c.activation) != activations.end()) {
            nodes.push_back(make_node(c, seed));
        }
        ++seed;
    }
    REQUIRE_FALSE(nodes.empty());
    OracleError worst;
    check_nodes(
        nodes,
        [](const std::string& variant) {
            return variant.rfind("nbits_", 0) == 0 || variant == "gemv_f16_down_projection";
        },
        "neither one of nbits' own kernels nor the original's down projection",
        [&](const FastestNode&, const Outcome& outcome) { worst.merge(outcome.error); });
    MESSAGE("worst: " << worst.describe() << " (relative " << worst.max_abs / std::max(worst.max_out, 1e-30f)
                      << ")");
}

}  // namespace

// Two test cases, so that gpu-check's slices compile their kernels in parallel on a cold cache.
TEST_CASE("KernelPolicy::Fastest meets the float64 oracle on every feature combination, fp16 and fp32")
{
    check_every_feature({DataType::Float16, DataType::Float32});
}

TEST_CASE("KernelPolicy::Fastest meets the float64 oracle on every feature combination, bf16")
{
    check_every_feature({DataType::BFloat16});
}

namespace {

// Nodes whose grid fills the SMs at 64 < M <= 256, which sm_90 runs on the
// wgmma GEMM (other GPUs on their own routes): every feature once, K tails
// (a partial block, K not a multiple of 8), N not a whole tile.
std::vector<FastestCase> wide_prefill_cases()
{
    std::vector<FastestCase> all;
    for (int i = 0; i < 8; ++i) {
        FastestCase c;
        c.activation = i % 2 == 1 ? DataType::BFloat16 : DataType::Float16;
        c.m = i < 4 ? 130 : 200;
        c.bits = i % 3 == 2 ? 8 : 4;
        const std::size_t blocks[] = {32, 128, 16, 64};
        c.block_size = blocks[i % 4];
        c.zero_points = i % 2 == 0;
        c.f32_scales = i == 3;
        c.bias = static_cast<Bias>(i % 4);
        c.k = i == 5 ? 1000 : i == 6 ? 1003 : 512;
        c.n = 6500;
        if (i == 2) {
            c.gamma = DataType::Float32;
        }
        if (i == 4 || i == 7) {
            c.gate_up = true;
            c.bias = Bias::None;
            c.f32_scales = false;
            c.n = 3300;
        }
        all.push_back(c);
    }
    return all;
}

// The nodes with twice their columns: 13000 (6600 for the paired node).
std::vector<FastestCase> twice_the_columns(std::vector<FastestCase> nodes)
{
    for (FastestCase& c : nodes) {
        c.n = c.gate_up ? 6600 : 13000;
    }
    return nodes;
}

// Node i at rows[i % 4] tokens.
std::vector<FastestCase> at_rows(std::vector<FastestCase> nodes, const std::array<std::size_t, 4>& rows)
{
    for (std::size_t i = 0; i < nodes.size(); ++i) {
        nodes[i].m = rows[i % 4];
    }
    return nodes;
}

// 256-token tiles: two token tiles, the second holding 1 to 128 rows, so the grid fills three quarters of the SMs.
std::vector<FastestCase> tall_tile_cases() { return at_rows(wide_prefill_cases(), {257, 300, 384, 264}); }

// 64-token tiles: columns enough to fill the SMs unsplit, M from 17 to 64.
std::vector<FastestCase> short_tile_cases() { return at_rows(twice_the_columns(wide_prefill_cases()), {64, 17, 40, 33}); }

// Whether this GPU runs the wgmma GEMM (sm_90), saying so when it does not.
bool runs_wgmma()
{
    if (matmul_gpu().capabilities().sm() == 90) {
        return true;
    }
    MESSAGE("the wgmma GEMM runs on sm_90 only");
    return false;
}

// Runs each node on the sm_90 wgmma GEMM under the caller's overrides, unsplit and every other one split
// over clusters of 2 (both forced: the plan's own rule may split either), against the float64 oracle. With
// `tma` (NBITS_PREFILL_TMA=1 set by the caller) the tensor memory accelerator feeds it where tensor maps can
// describe A and the weights (K % 8 == 0, weight rows of whole 16 bytes); without, cp.async does everywhere
// (NBITS_PREFILL_TMA=0 here), so that those tiles keep their own cases.
void check_wgmma_nodes(const std::vector<FastestCase>& nodes, std::uint64_t seed, bool tma = false)
{
    const ScopedEnv copies(ops::kPrefillTmaEnv, tma ? std::optional<std::string>("1") : std::optional<std::string>("0"));
    for (std::size_t i = 0; i < nodes.size(); ++i) {
        const FastestCase& c = nodes[i];
        CAPTURE(c.describe());
        const bool split = i % 2 == 1;
        CAPTURE(split);
        const ScopedEnv split_k(ops::kPrefillSplitKEnv, std::string(split ? "2" : "1"));
        const std::optional<Outcome> ran = check_prefill_run(c, seed++, split ? 2u : 1u, "nbits_prefill_wgmma");
        const std::size_t row_bytes = (c.k + c.block_size - 1) / c.block_size * c.block_size * c.bits / 8;
        if (ran) {
            CHECK(ran->tma == (tma && c.k % 8 == 0 && row_bytes % 16 == 0));
        }
    }
}

}  // namespace

TEST_CASE("the sm_90 wgmma prefill GEMM meets the float64 oracle on every feature")
{
    const bool sm90 = matmul_gpu().capabilities().sm() == 90;
    const std::vector<FastestNode> nodes = make_nodes(wide_prefill_cases(), 0x90a0000000000000ull);
    compile_in_parallel(nodes);
    for (const FastestNode& node : nodes) {
        const FastestCase& c = node.spec;
        CAPTURE(c.describe());
        const Outcome outcome = run_node(node);
        CAPTURE(outcome.variant);
        CAPTURE(outcome.error.describe());
        if (sm90) {
            CHECK(outcome.variant == "nbits_prefill_wgmma");
        }
        check_oracle_bounds(c, outcome);
    }
}

TEST_CASE("split-K prefill (NBITS_PREFILL_SPLIT_K): clusters of CTAs sharing a tile's K meet the float64 oracle")
{
    if (matmul_gpu().capabilities().compute_major < 9) {
        MESSAGE("thread block clusters need compute capability 9.0: the override is ignored on this GPU");
        return;
    }
    struct SplitCase {
        FastestCase spec;
        int split;               // NBITS_PREFILL_SPLIT_K
        std::uint32_t expected;  // CTAs per cluster after the one-k-tile-each clamp
    };
    std::vector<SplitCase> split_cases;
    // The wgmma GEMM on sm_90 (64-k tiles): an even split, an uneven one (8 k tiles over 3 CTAs: 3, 3, 2), a K
    // tail. Other GPUs take these nodes through the dequantise + cuBLASLt route, which is not split.
    const std::vector<FastestCase> wide =
        matmul_gpu().capabilities().sm() == 90 ? wide_prefill_cases() : std::vector<FastestCase>{};
    for (std::size_t i = 0; i < wide.size(); ++i) {
        split_cases.push_back({wide[i], i % 2 == 0 ? 2 : 3, static_cast<std::uint32_t>(i % 2 == 0 ? 2 : 3)});
    }
    // The mma.sync GEMM at M <= 64: K = 1003 in 4 k tiles of 256 over 3 CTAs leaves the last one none;
    // K = 512 in 4 tiles of 128 clamps 8 to 4; block 16 makes the tiles 64 deep (8 of them, 8 CTAs).
    auto fused = [&](DataType activation, std::size_t m, std::size_t k, std::size_t bits, std::size_t block_size,
                     bool zp, Bias bias, bool gamma, bool gate_up, int split, std::uint32_t expected) {
        split_cases.push_back(
            {feature_case(activation, m, bits, block_size, zp, bias, gamma, gate_up, 300, k), split, expected});
    };
    fused(DataType::Float16, 20, 1003, 4, 32, true, Bias::Folded, false, false, 3, 3);
    fused(DataType::BFloat16, 33, 512, 8, 64, false, Bias::PerToken, true, false, 8, 4);
    fused(DataType::Float16, 64, 512, 4, 16, true, Bias::None, false, true, 8, 8);
    fused(DataType::BFloat16, 17, 4096, 4, 128, false, Bias::Plain, false, false, 4, 4);

    std::uint64_t seed = 0x5b117000ull;
    for (const SplitCase& split_case : split_cases) {
        const FastestCase& c = split_case.spec;
        CAPTURE(c.describe());
        CAPTURE(split_case.split);
        const ScopedEnv split(ops::kPrefillSplitKEnv, std::to_string(split_case.split));
        check_prefill_run(c, seed++, split_case.expected);
    }
}

namespace {

// The 128-row tiles' cases at M = 12..32 over N columns (one node N - 36, so that its last tile is partial): fp16
// and bf16, block sizes 16..128, fp32 scales, every bias kind, K of two to eight 128-deep k tiles, odd K included.
std::vector<FastestCase> wide_tile_cases(std::size_t n)
{
    std::vector<FastestCase> nodes = {
        feature_case(DataType::Float16, 12, 4, 32, false, Bias::None, false, false, n, 256),
        feature_case(DataType::BFloat16, 16, 4, 128, false, Bias::Plain, false, false, n, 1003),
        feature_case(DataType::Float16, 13, 4, 16, false, Bias::Folded, false, false, n - 36, 512),
        feature_case(DataType::BFloat16, 32, 4, 64, false, Bias::PerToken, false, false, n, 512),
        feature_case(DataType::Float16, 24, 4, 32, false, Bias::None, false, false, n, 1000),
    };
    nodes[2].f32_scales = true;
    return nodes;
}

}  // namespace

TEST_CASE("the fused GEMM's 128-row tiles at M = 12..32 (sm_90, grids that fill a round) meet the float64 oracle")
{
    // N = 27136: 212 column tiles of 128 rows, four fifths of the H200's 264 CTA slots, so the plan takes these
    // tiles from M = 12 (the decode kernel elsewhere, and below M = 12; the preset's 64-row tiles past M = 16).
    const auto& device = matmul_gpu().capabilities();
    const bool taken = device.sm() == 90 && device.multiprocessor_count == 132;
    std::uint64_t seed = 0x128e000ull;
    for (const FastestCase& c : wide_tile_cases(27136)) {
        CAPTURE(c.describe());
        check_prefill_run(c, seed++, 1, taken || c.m > 16 ? "nbits_prefill_fused" : nullptr);
    }
}

TEST_CASE("the fused GEMM's 128-row tiles at M = 12..32 with K split over clusters of 2 (NBITS_PREFILL_WIDE_SPLIT) "
          "meet the float64 oracle")
{
    // N = 14336: 112 column tiles of 128 rows, 224 CTAs split, four fifths of the H200's 264 CTA slots.
    const auto& device = matmul_gpu().capabilities();
    if (device.sm() != 90 || device.multiprocessor_count != 132) {
        return;  // the rule counts the H200's slots
    }
    const ScopedEnv wide(ops::kPrefillWideSplitEnv, std::string("1"));
    std::uint64_t seed = 0x31de5000ull;
    for (const FastestCase& c : wide_tile_cases(14336)) {
        CAPTURE(c.describe());
        const std::optional<Outcome> ran = run_or_fail(c, seed++);
        if (!ran) {
            continue;
        }
        CAPTURE(ran->variant);
        CAPTURE(ran->error.describe());
        CHECK(ran->variant == "nbits_prefill_fused");
        CHECK(ran->split_k == 2);
        check_oracle_bounds(c, *ran);
    }
}

TEST_CASE("the sm_90 wgmma GEMM with 256 weight rows a CTA (NBITS_PREFILL_WGMMA_TILE_N) meets the float64 oracle")
{
    if (!runs_wgmma()) {
        return;
    }
    const ScopedEnv rows(ops::kPrefillWgmmaTileNEnv, std::string("256"));
    // 256-row tiles (128 output columns paired) fill the SMs with twice the columns.
    check_wgmma_nodes(twice_the_columns(wide_prefill_cases()), 0x256a0000ull);
}

TEST_CASE("the sm_90 wgmma GEMM with 256 tokens a tile (NBITS_PREFILL_WGMMA_TILE_M) meets the float64 oracle past "
          "M = 256")
{
    if (!runs_wgmma()) {
        return;
    }
    const ScopedEnv tokens(ops::kPrefillWgmmaTileMEnv, std::string("256"));
    check_wgmma_nodes(tall_tile_cases(), 0x256b0000ull);
}

TEST_CASE("the sm_90 wgmma GEMM over 64-token tiles (NBITS_PREFILL_WGMMA_MIN_M) meets the float64 oracle below M = 65")
{
    if (!runs_wgmma()) {
        return;
    }
    const ScopedEnv min_m(ops::kPrefillWgmmaMinMEnv, std::string("17"));
    check_wgmma_nodes(at_rows(twice_the_columns(wide_prefill_cases()), {17, 33, 64, 40}), 0x64a0000ull);
}

TEST_CASE("the sm_90 wgmma GEMM over two rows of 64-token tiles at M = 65..128 meets the float64 oracle, forced "
          "(NBITS_PREFILL_WGMMA_TILE_M=64) and as planned")
{
    if (!runs_wgmma()) {
        return;
    }
    {
        const ScopedEnv tokens(ops::kPrefillWgmmaTileMEnv, std::string("64"));
        check_wgmma_nodes(at_rows(twice_the_columns(wide_prefill_cases()), {65, 100, 128, 80}), 0x64b0000ull);
    }
    // The plan's own choice on the narrow deep nodes whose 128-token grid leaves SMs idle (it counts the H200's 132
    // SMs): Llama-3.2-1B down (16 column tiles, split 3) and Qwen2.5-1.5B down (12, split 4), every feature once.
    const auto& device = matmul_gpu().capabilities();
    if (device.multiprocessor_count != 132) {
        MESSAGE("the planned cases count 132 SMs; this GPU has " << device.multiprocessor_count);
        return;
    }
    struct Planned {
        FastestCase spec;
        std::uint32_t split;
    };
    const std::vector<Planned> planned = {
        {feature_case(DataType::Float16, 100, 4, 32, false, Bias::Plain, false, false, 2048, 8192), 3},
        {feature_case(DataType::BFloat16, 65, 4, 128, true, Bias::PerToken, false, false, 2048, 8192), 3},
        {feature_case(DataType::Float16, 128, 8, 64, true, Bias::Folded, true, false, 1536, 8960), 4},
        {feature_case(DataType::BFloat16, 96, 4, 16, false, Bias::None, false, false, 1536, 8960), 4},
    };
    std::uint64_t seed = 0x64c0000ull;
    for (const Planned& p : planned) {
        CAPTURE(p.spec.describe());
        const std::optional<Outcome> ran = check_prefill_run(p.spec, seed++, p.split, "nbits_prefill_wgmma");
        if (ran) {
            CHECK(ran->row_tiles == 2);
            CHECK_FALSE(ran->tma);
        }
    }
}

TEST_CASE("the sm_90 wgmma GEMM's 128-token tiles with producer warps (NBITS_PREFILL_PRODUCER_WARPS 1 and 2) meet "
          "the float64 oracle")
{
    if (!runs_wgmma()) {
        return;
    }
    // The 128-token tiles (M > 64) with 1 and 2 producer warps (one CTA an SM).
    for (const char* warps : {"1", "2"}) {
        CAPTURE(warps);
        const ScopedEnv producers(ops::kPrefillProducerWarpsEnv, std::string(warps));
        check_wgmma_nodes(wide_prefill_cases(), 0x9d0a0000ull);
    }
}

TEST_CASE("the sm_90 wgmma GEMM's 64-token tiles without producer warps and with 2 (NBITS_PREFILL_PRODUCER_WARPS 0 "
          "and 2) meet the float64 oracle")
{
    if (!runs_wgmma()) {
        return;
    }
    // The 64-token tiles, which take 4 by default, with none (every warp copies and computes) and with 2.
    const ScopedEnv min_m(ops::kPrefillWgmmaMinMEnv, std::string("17"));
    for (const char* warps : {"0", "2"}) {
        CAPTURE(warps);
        const ScopedEnv producers(ops::kPrefillProducerWarpsEnv, std::string(warps));
        check_wgmma_nodes(short_tile_cases(), 0x9d640000ull);
    }
}

TEST_CASE("the sm_90 wgmma GEMM fed by the tensor memory accelerator (NBITS_PREFILL_TMA) meets the float64 oracle")
{
    if (!runs_wgmma()) {
        return;
    }
    const ScopedEnv tma(ops::kPrefillTmaEnv, std::string("1"));
    // Every feature on the three tile heights (K = 1003 keeps the cp.async copies): on 128-token tiles thread 0
    // issues the tensor copies, or with NBITS_PREFILL_PRODUCER_WARPS=1 a producer warp.
    check_wgmma_nodes(wide_prefill_cases(), 0x7a1a0000ull, true);
    {
        const ScopedEnv producers(ops::kPrefillProducerWarpsEnv, std::string("1"));
        check_wgmma_nodes(wide_prefill_cases(), 0x7a1c0000ull, true);
    }
    {
        const ScopedEnv tokens(ops::kPrefillWgmmaTileMEnv, std::string("256"));
        check_wgmma_nodes(tall_tile_cases(), 0x7a1b0000ull, true);
    }
    const ScopedEnv min_m(ops::kPrefillWgmmaMinMEnv, std::string("17"));
    check_wgmma_nodes(short_tile_cases(), 0x7a640000ull, true);
}

TEST_CASE("the wgmma GEMM with its last partial wave's K split in a second launch (NBITS_PREFILL_TAIL_SPLIT) meets "
          "the float64 oracle")
{
    if (!runs_wgmma()) {
        return;
    }
    const ScopedEnv tail(ops::kPrefillTailSplitEnv, std::string("1"));
    // 150 column tiles of two token tiles: 132 column tiles fill the H200's 264 CTA slots, the other 18 (36 CTAs)
    // go to the second launch, split over clusters of up to 4.
    std::vector<FastestCase> nodes = at_rows(wide_prefill_cases(), {130, 140, 129, 136});
    for (FastestCase& c : nodes) {
        c.n = c.gate_up ? 9600 : 19200;
    }
    std::uint64_t seed = 0x7a11000000000000ull;
    for (std::size_t i = 0; i < nodes.size(); ++i) {
        const FastestCase& c = nodes[i];
        CAPTURE(c.describe());
        for (const bool tma : {false, true}) {
            if (tma && i % 2 == 1) {
                continue;  // the tensor memory accelerator on every other feature
            }
            CAPTURE(tma);
            const ScopedEnv tensor_copies(ops::kPrefillTmaEnv, tma ? std::optional<std::string>("1") : std::nullopt);
            const std::optional<Outcome> ran = run_or_fail(c, seed++);
            if (!ran) {
                continue;
            }
            CAPTURE(ran->variant);
            CAPTURE(ran->error.describe());
            CHECK(ran->variant == "nbits_prefill_wgmma");
            CHECK(ran->gemm_launches == 2);
            CHECK(ran->split_k > 1);
            check_oracle_bounds(c, *ran);
        }
    }
}

namespace {

// Whether `step` is specialised with `define` (e.g. "NBITS_CLUSTER_K=1").
bool step_defines(const ops::KernelStep& step, const std::string& define)
{
    return std::find(step.defines.begin(), step.defines.end(), define) != step.defines.end();
}

// A node's Fastest operator with its inputs on the device, run once eagerly into `output`.
struct EagerNode {
    FastestNode node;
    std::unique_ptr<ops::MatMulNBits> op;
    DeviceTensors device;
    DeviceOutput output;
    RunOutcome eager;

    EagerNode(CudaRuntime& runtime, const FastestCase& c, std::uint64_t seed)
        : node(make_node(c, seed)),
          op(fastest_operator(node)),
          device(runtime, node.inputs),
          output(runtime, c.activation, {c.m, c.n}),
          eager(run_into(*op, device.tensors(), output))
    {
    }
    // Whether some launched entry's name holds `part`.
    bool launches(const std::string& part) const
    {
        const std::vector<std::string> entries = kernel_entries(eager.plan);
        return std::any_of(entries.begin(), entries.end(),
                           [&](const std::string& entry) { return entry.find(part) != std::string::npos; });
    }
    // Whether it ran as a stream-K grid (under NBITS_PREFILL_STREAM_K=1), checking that it did exactly where the
    // tensor maps describe its rows: K % 8 = 0 and weight rows of whole 16 bytes.
    bool streamed() const
    {
        const FastestCase& c = node.spec;
        const bool streamed = launches(c.gate_up ? "nbits_prefill_gate_up_stream_k" : "nbits_prefill_gemm_stream_k");
        const std::size_t row_bytes = (c.k + c.block_size - 1) / c.block_size * c.block_size * c.bits / 8;
        CHECK(streamed == (c.k % 8 == 0 && row_bytes % 16 == 0));
        return streamed;
    }
    // The eager run against the float64 oracle's bounds.
    void check_oracle() const
    {
        Outcome ran;
        ran.error = oracle_error(output_values(node.spec.activation, eager.bytes), node.expected);
        CAPTURE(ran.error.describe());
        check_oracle_bounds(node.spec, ran);
    }
    // Captured into a CUDA graph, its replays write the eager run's bytes.
    void check_replays(CudaRuntime& runtime)
    {
        REQUIRE(eager.plan.capture_safe);
        check_graph_replays(runtime, output, eager.bytes, element_size(node.spec.activation),
                            [&] { op->run(device.tensors(), {output.tensor()}); });
    }
};

}  // namespace

TEST_CASE("the stream-K wgmma GEMM (NBITS_PREFILL_STREAM_K) meets the float64 oracle and writes the same bytes every "
          "run, eager and from a CUDA graph")
{
    if (!runs_wgmma()) {
        return;
    }
    const ScopedEnv stream_k(ops::kPrefillStreamKEnv, std::string("1"));
    // Every feature at one to three token tiles, the last one partial (K = 1000: a partial last k tile; K = 1003
    // keeps its own plan, the tensor maps cannot describe its rows), on the 64- and 128-token tiles (M = 33 to 64
    // and 65 to 128: two CTAs an SM) and the 256-token ones. 6500 columns of K = 512 at M <= 256: 408 units (51
    // tiles of 8 k tiles), 3 or 4 a CTA of the H200's 132 (1.5 of its 264 at M <= 128), so that most tiles are
    // summed from the partials of two to six CTAs; 13000 columns at M = 520: 306 tiles, two rounds of the grid and
    // more, so the first 174 shared (10.5 units a CTA) and a round of whole tiles after them; K = 4096 over 2000
    // columns: a tile's 64 k tiles over 8 CTAs (16 at M = 100). Then 550 of the 128-token tiles (two CTAs an SM, no
    // producers): 286 shared over 264 CTAs, then a round of whole ones.
    std::vector<FastestCase> nodes = at_rows(wide_prefill_cases(), {129, 256, 300, 520});
    for (std::size_t i = 0; i < nodes.size(); ++i) {
        if (nodes[i].m == 520) {
            nodes[i].n = nodes[i].gate_up ? 6600 : 13000;
        }
    }
    for (const FastestCase& c : at_rows(wide_prefill_cases(), {80, 128, 65, 100})) {
        nodes.push_back(c);
    }
    for (const FastestCase& c : at_rows(wide_prefill_cases(), {33, 64, 40, 48})) {
        nodes.push_back(c);
    }
    nodes.push_back(feature_case(DataType::Float16, 200, 4, 32, false, Bias::Plain, false, false, 2000, 4096));
    nodes.push_back(feature_case(DataType::BFloat16, 384, 4, 128, true, Bias::PerToken, false, false, 2000, 4096));
    nodes.push_back(feature_case(DataType::Float16, 100, 8, 32, true, Bias::Folded, false, false, 2000, 4096));
    nodes.push_back(feature_case(DataType::BFloat16, 100, 4, 32, false, Bias::None, false, true, 1000, 4096));
    CudaRuntime& runtime = matmul_gpu();
    std::uint64_t seed = 0x5743000000000000ull;
    for (const FastestCase& c : nodes) {
        CAPTURE(c.describe());
        EagerNode run(runtime, c, seed++);
        const bool streamed = run.streamed();
        run.check_oracle();
        if (streamed) {
            CHECK(run.eager.plan.variant == "nbits_prefill_wgmma");
            // The partial tiles are summed in CTA order: a second run, and graph replays, write the same bytes.
            run.check_replays(runtime);
        }
    }
    const ScopedEnv tile_m(ops::kPrefillWgmmaTileMEnv, std::string("128"));
    const FastestCase rounds = feature_case(DataType::BFloat16, 520, 4, 32, true, Bias::Plain, false, false, 14000);
    CAPTURE(rounds.describe());
    EagerNode run(runtime, rounds, seed);
    CHECK(run.launches("nbits_prefill_gemm_stream_k"));
    run.check_oracle();
    run.check_replays(runtime);
}

TEST_CASE("the producers' register hand-back (NBITS_PREFILL_REGISTER_HANDBACK) meets the float64 oracle on the "
          "256-token tiles, whole and as a stream-K grid")
{
    if (!runs_wgmma()) {
        return;
    }
    const ScopedEnv handback(ops::kPrefillRegisterHandbackEnv, std::string("1"));
    // Whole 256-token tiles fed by TMA, every feature: the producers wait on the named barrier before they take
    // their registers back.
    {
        const ScopedEnv tokens(ops::kPrefillWgmmaTileMEnv, std::string("256"));
        check_wgmma_nodes(tall_tile_cases(), 0x4b1b0000ull, true);
    }
    // The stream-K grid of 256-token tiles, every feature (K = 512 over 6500 columns: most tiles summed from the
    // partials of two to six CTAs): the producers exit with the registers they kept.
    const ScopedEnv stream_k(ops::kPrefillStreamKEnv, std::string("1"));
    CudaRuntime& runtime = matmul_gpu();
    std::uint64_t seed = 0x4b5c000000000000ull;
    for (const FastestCase& c : at_rows(wide_prefill_cases(), {300, 257, 384, 264})) {
        CAPTURE(c.describe());
        EagerNode run(runtime, c, seed++);
        const bool streamed = run.streamed();
        const std::vector<ops::PlanStep>& steps = run.eager.plan.steps;
        CHECK(std::any_of(steps.begin(), steps.end(), [](const ops::PlanStep& step) {
                  const auto* kernel = std::get_if<ops::KernelStep>(&step);
                  return kernel != nullptr && step_defines(*kernel, "NBITS_REGISTER_HANDBACK=1");
              }) == streamed);
        run.check_oracle();
    }
}

TEST_CASE("stream-K grids on four caller streams at once, fewer of their CTAs resident than launched, finish with "
          "the bytes of a lone run")
{
    if (!runs_wgmma()) {
        return;
    }
    // A CTA of the 256-token tiles fills an SM (two of the 64- or 128-token ones do), so four grids of a CTA a slot
    // leave most CTAs of each waiting for one: a CTA that summed a tile while waiting for CTAs launched after it
    // could wait forever. Tiles of 64 k tiles over 8 CTAs (16 on the smaller tiles), and the paired node.
    const ScopedEnv stream_k(ops::kPrefillStreamKEnv, std::string("1"));
    const std::vector<FastestCase> nodes = {
        feature_case(DataType::BFloat16, 384, 4, 32, true, Bias::Plain, false, false, 2000, 4096),
        feature_case(DataType::Float16, 300, 4, 64, false, Bias::None, false, true, 1000, 4096),
        feature_case(DataType::Float16, 100, 4, 32, true, Bias::Plain, false, false, 2000, 4096),
        feature_case(DataType::BFloat16, 64, 8, 32, false, Bias::None, false, true, 1000, 4096)};
    CudaRuntime& runtime = matmul_gpu();
    std::uint64_t seed = 0x5743100000000000ull;
    for (const FastestCase& c : nodes) {
        CAPTURE(c.describe());
        const EagerNode lone(runtime, c, seed++);
        REQUIRE(lone.launches("_stream_k"));
        constexpr int kStreams = 4;
        constexpr int kRuns = 5;
        std::vector<std::unique_ptr<DeviceOutput>> outputs;
        for (int s = 0; s < kStreams; ++s) {
            outputs.push_back(
                std::make_unique<DeviceOutput>(runtime, c.activation, std::vector<std::size_t>{c.m, c.n}));
        }
        const std::vector<std::string> failures = run_on_caller_streams(runtime, kStreams, [&](int s, CUstream stream) {
            RunOptions options;
            options.stream = stream;
            for (int run = 0; run < kRuns; ++run) {
                lone.op->run(lone.device.tensors(), {outputs[static_cast<std::size_t>(s)]->tensor()}, options);
            }
        });
        for (int s = 0; s < kStreams; ++s) {
            CAPTURE(s);
            CHECK(failures[static_cast<std::size_t>(s)].empty());
            const std::string difference = byte_difference(outputs[static_cast<std::size_t>(s)]->bytes(),
                                                           lone.eager.bytes, element_size(c.activation));
            CHECK_MESSAGE(difference.empty(), difference);
        }
    }
}

TEST_CASE("the TMA-fed wgmma GEMM (NBITS_PREFILL_TMA) replays from a CUDA graph with the bytes of an eager run")
{
    if (!runs_wgmma()) {
        return;
    }
    // The tensor maps are kernel parameters encoded from the run's tensors: a graph keeps them by value.
    CudaRuntime& runtime = matmul_gpu();
    const ScopedEnv tma(ops::kPrefillTmaEnv, std::string("1"));
    const ScopedEnv min_m(ops::kPrefillWgmmaMinMEnv, std::string("17"));
    // A plain node on 64-token tiles and a paired one on 256-token tiles (a warpgroup of producers).
    const FastestCase plain = feature_case(DataType::Float16, 40, 4, 32, true, Bias::Plain, false, false, 13000);
    const FastestCase paired = feature_case(DataType::BFloat16, 300, 4, 128, false, Bias::None, true, true, 3300, 1024);
    std::uint64_t seed = 0x7a9a0000ull;
    for (const FastestCase& c : {plain, paired}) {
        CAPTURE(c.describe());
        const ScopedEnv tokens(ops::kPrefillWgmmaTileMEnv,
                               c.m > 256 ? std::optional<std::string>("256") : std::nullopt);
        EagerNode run(runtime, c, seed++);
        // The paired node's RMS-norm prologue runs as a pass of its own before the GEMM.
        CHECK(run.launches("_tma"));
        run.check_oracle();
        run.check_replays(runtime);
    }
}

// Every decode case of the feature matrix (M = 1..16, fp16 and bf16).
std::vector<FastestCase> decode_cases()
{
    std::vector<FastestCase> decode;
    for (const FastestCase& c : cases()) {
        if (c.m <= 16 && c.activation != DataType::Float32) {
            decode.push_back(c);
        }
    }
    return decode;
}

// check_nodes for decode nodes: nbits' decode kernels, or the original's down-projection GEMV where Fastest keeps
// it because it measured faster.
void check_decode_nodes(const std::vector<FastestNode>& nodes)
{
    check_nodes(
        nodes,
        [](const std::string& variant) {
            return variant == "nbits_decode" || variant == "nbits_decode_gate_up" ||
                   variant == "gemv_f16_down_projection";
        },
        "neither nbits' decode kernels nor the original's down projection");
}

// Whether the step of each node that launches nbits' decode kernels has `define`, checked against `expected`.
void check_decode_define(const std::vector<FastestNode>& nodes, const std::string& define, bool expected)
{
    for (const FastestNode& node : nodes) {
        const ops::LaunchPlan plan = fastest_plan(node);
        const auto* step = std::get_if<ops::KernelStep>(&plan.steps.front());
        if (step != nullptr && step->entry.rfind("nbits_decode", 0) == 0) {
            CAPTURE(node.spec.describe());
            CHECK(step_defines(*step, define) == expected);
        }
    }
}

TEST_CASE("decode with warps across the columns (NBITS_DECODE_COL_WARPS) meets the float64 oracle")
{
    // Every decode case with 2 warps across a CTA's columns, those at M = 5 and 9..16 also with 4 of two column
    // tiles each: groups of 32 to 128 columns over N = 157 and 160, so that whole warps' parts lie past N; plus two
    // wide nodes whose groups are whole, K of partial steps.
    std::vector<FastestCase> decode = decode_cases();
    FastestCase wide = feature_case(DataType::Float16, 16, 4, 32, false, Bias::Plain, false, false, 4096, 1000);
    decode.push_back(wide);
    wide.gate_up = true;
    wide.bias = Bias::None;
    wide.activation = DataType::BFloat16;
    wide.m = 9;
    decode.push_back(wide);
    std::uint64_t seed = 0xc01c0000ull;
    for (const auto& [col_warps, tiles] : {std::pair<const char*, const char*>{"2", nullptr}, {"4", "2"}}) {
        CAPTURE(col_warps);
        const ScopedEnv warps(ops::kDecodeColWarpsEnv, std::string(col_warps));
        const ScopedEnv tile_count(ops::kDecodeTilesEnv,
                                   tiles != nullptr ? std::optional<std::string>(tiles) : std::nullopt);
        std::vector<FastestNode> nodes;
        for (const FastestCase& c : decode) {
            if (col_warps == std::string("2") || c.m == 5 || c.m >= 9) {
                nodes.push_back(make_node(c, seed++));
            }
        }
        check_decode_nodes(nodes);
    }
}

TEST_CASE("decode with the activations staged everywhere it can (NBITS_DECODE_STAGE_ACTS=1) meets the float64 oracle")
{
    // Every decode case with the rows of A forced through the cp.async ring, up to M = 16 (the RMS-norm prologue
    // and a K of partial 16-byte pieces load them as computed); plus a wide node of two batch tiles whose column
    // groups are whole, with two column tiles.
    const ScopedEnv staged(ops::kDecodeStageActsEnv, std::string("1"));
    std::vector<FastestCase> decode = decode_cases();
    decode.push_back(feature_case(DataType::Float16, 16, 4, 32, true, Bias::Plain, false, false, 4096, 1024));
    decode.push_back(feature_case(DataType::BFloat16, 12, 8, 64, false, Bias::None, false, true, 2048, 512));
    check_decode_nodes(make_nodes(decode, 0x57a90000ull));
    const ScopedEnv two_tiles(ops::kDecodeTilesEnv, std::string("2"));
    check_decode_nodes({make_node(decode[decode.size() - 2], 0x57a90000ull + decode.size())});
}

namespace {

// Every decode case with K long enough for the cluster's warps (4096, or 4000 with a partial last step), its column
// groups split over clusters of `cluster_k` CTAs (of 4: those at M = 1, 5 and 9..16; 2 where the k steps are too
// few, int4 at M = 1 and K > N); N = 157 and 160 leave the last group partial; a wide node walks several groups a
// cluster. The seeds run on from those of clusters of 2 to those of 4.
void check_decode_clusters(const char* cluster_k)
{
    std::uint64_t seed = 0xc1a50000ull;
    if (cluster_k == std::string("4")) {
        seed += decode_cases().size() + 1;  // the nodes of clusters of 2
    }
    if (matmul_gpu().capabilities().compute_major < 9) {
        MESSAGE("thread block clusters need compute capability 9.0: skipped on " << matmul_gpu().capabilities().name);
        return;
    }
    const ScopedEnv cluster(ops::kDecodeClusterKEnv, std::string(cluster_k));
    std::vector<FastestNode> nodes;
    for (FastestCase c : decode_cases()) {
        if (cluster_k == std::string("2") || c.m == 1 || c.m == 5 || c.m >= 9) {
            c.k = seed % 2 == 0 ? 4096 : 4000;
            nodes.push_back(make_node(c, seed++));
        }
    }
    nodes.push_back(
        make_node(feature_case(DataType::Float16, 1, 4, 32, true, Bias::Plain, false, false, 8192, 4096), seed++));
    check_decode_define(nodes, "NBITS_CLUSTER_K=1", false);
    check_decode_nodes(nodes);
}

}  // namespace

TEST_CASE("decode with clusters of 2 splitting K (NBITS_DECODE_CLUSTER_K=2) meets the float64 oracle")
{
    check_decode_clusters("2");
}

TEST_CASE("decode with clusters of 4 splitting K (NBITS_DECODE_CLUSTER_K=4) meets the float64 oracle")
{
    check_decode_clusters("4");
}

TEST_CASE("decode's wide column groups in clusters of 2 at M = 9..16 (two tiles, two column warps) meet the float64 "
          "oracle, forced and as planned")
{
    if (matmul_gpu().capabilities().compute_major < 9) {
        MESSAGE("thread block clusters need compute capability 9.0: skipped on " << matmul_gpu().capabilities().name);
        return;
    }
    // Every decode case of two batch tiles with two column warps of two tiles each in clusters of 2, K long enough
    // for the cluster's warps (4096, or 4000 with a partial last step); N = 157 and 160 leave the last group partial.
    std::uint64_t seed = 0x91de0000ull;
    {
        const ScopedEnv tiles(ops::kDecodeTilesEnv, std::string("2"));
        const ScopedEnv col_warps(ops::kDecodeColWarpsEnv, std::string("2"));
        const ScopedEnv cluster(ops::kDecodeClusterKEnv, std::string("2"));
        std::vector<FastestNode> nodes;
        for (FastestCase c : decode_cases()) {
            if (c.m >= 9) {
                c.k = seed % 2 == 0 ? 4096 : 4000;
                nodes.push_back(make_node(c, seed++));
            }
        }
        check_decode_define(nodes, "NBITS_CLUSTER_K=2", true);
        check_decode_nodes(nodes);
    }
    // As planned on sm_90 with 132 SMs (the H100 and H200): two tiles in clusters of 2 (a long-K down projection's
    // shape, bf16 with a bias) and two column warps of two tiles (Llama-3-70B o's, fp16).
    std::vector<FastestNode> planned = {
        make_node(feature_case(DataType::BFloat16, 12, 4, 32, false, Bias::Plain, false, false, 4096, 14336), seed++),
        make_node(feature_case(DataType::Float16, 16, 4, 128, false, Bias::None, false, false, 8192, 8192), seed++)};
    if (matmul_gpu().capabilities().multiprocessor_count == 132) {
        check_decode_define(planned, "NBITS_CLUSTER_K=2", true);
        check_decode_define({planned[0]}, "NBITS_TILES=2", true);
        check_decode_define({planned[1]}, "NBITS_COL_WARPS=2", true);
    }
    check_decode_nodes(planned);
}

TEST_CASE("decode with two chunks a lane per k step (NBITS_DECODE_CHUNKS=2) meets the float64 oracle")
{
    // Every decode case with two 16-byte chunks a lane and row per k step (256 int4 or 128 int8 codes a step,
    // the plan's choice only for int4 at M <= 8), plus a paired node of a partial last step at M = 8, a long-K
    // bf16 down projection with zero points and a node of two batch tiles whose groups are whole.
    const ScopedEnv two(ops::kDecodeChunksEnv, std::string("2"));
    std::vector<FastestCase> decode = decode_cases();
    decode.push_back(feature_case(DataType::Float16, 8, 4, 32, false, Bias::None, false, true, 1000, 4000));
    decode.push_back(feature_case(DataType::BFloat16, 1, 4, 128, true, Bias::Plain, false, false, 4096, 14336));
    decode.push_back(feature_case(DataType::Float16, 13, 8, 64, true, Bias::Folded, false, false, 1024, 4096));
    const std::vector<FastestNode> nodes = make_nodes(decode, 0xc2c20000ull);
    check_decode_define(nodes, "NBITS_CHUNKS=2", true);
    check_decode_nodes(nodes);
}

TEST_CASE("decode with rings of 3 and 4 stages (NBITS_DECODE_STAGES) meets the float64 oracle, and so do the paired "
          "node and a short K at M = 1 and int8 with the chunks planned for the device")
{
    // The decode cases at M = 1 and 16 with each warp keeping 3 k steps in flight (the ring index wraps at a count
    // that does not divide the steps of a group, and the loads run across group boundaries), those at M = 5 with 4:
    // each depth is a kernel of its own to compile, so not every case takes both.
    std::uint64_t seed = 0x57a60000ull;
    for (const auto& [stages, ms] : {std::pair<const char*, std::vector<std::size_t>>{"3", {1, 16}}, {"4", {5}}}) {
        CAPTURE(stages);
        const ScopedEnv depth(ops::kDecodeStagesEnv, std::string(stages));
        std::vector<FastestCase> decode;
        for (const FastestCase& c : decode_cases()) {
            if (std::find(ms.begin(), ms.end(), c.m) != ms.end()) {
                decode.push_back(c);
            }
        }
        const std::vector<FastestNode> nodes = make_nodes(decode, seed);
        seed += 0x1000;
        check_decode_define(nodes, std::string("NBITS_STAGES=") + stages, true);
        check_decode_nodes(nodes);
    }
    // As planned at M = 1 on a GPU of 132 SMs, in two stages: the symmetric paired node from K = 3584 on, fp16,
    // and bf16 with the RMS-norm prologue over a K of a partial last step, in two chunks where the device has
    // 30 GB/s an SM or more (the H200; one on the H100); one weight set of a K under 4096 in two chunks where one
    // chunk would take two tiles (Phi-3.5-mini qkv, fp16) or three CTAs an SM (Qwen2.5-7B qkv, bf16 with a bias);
    // one symmetric int8 weight set of one tile in two chunks (Llama-3-8B o, fp16 with a bias, M = 1; Phi-3.5-mini
    // o, bf16, M = 8, whose K leaves each warp 3 steps of 128 codes).
    const std::vector<FastestNode> paired = {
        make_node(feature_case(DataType::Float16, 1, 4, 32, false, Bias::None, false, true, 14336, 4096), seed++),
        make_node(feature_case(DataType::BFloat16, 1, 4, 32, false, Bias::None, true, true, 8192, 4000), seed++)};
    const std::vector<FastestNode> single_set = {
        make_node(feature_case(DataType::Float16, 1, 4, 32, false, Bias::None, false, false, 9216, 3072), seed++),
        make_node(feature_case(DataType::BFloat16, 1, 4, 32, false, Bias::Plain, false, false, 4608, 3584), seed++),
        make_node(feature_case(DataType::Float16, 1, 8, 32, false, Bias::Plain, false, false, 4096, 4096), seed++),
        make_node(feature_case(DataType::BFloat16, 8, 8, 32, false, Bias::None, false, false, 3072, 3072), seed++)};
    const Capabilities& device = matmul_gpu().capabilities();
    if (device.multiprocessor_count == 132) {
        const bool two_chunks_paired =
            device.memory_bandwidth_gb_per_s == 0 || device.memory_bandwidth_gb_per_s >= 30 * 132;
        MESSAGE("memory bandwidth ", device.memory_bandwidth_gb_per_s, " GB/s: the paired node at M = 1 in ",
                std::string(two_chunks_paired ? "two chunks" : "one chunk"));
        check_decode_define(paired, "NBITS_STAGES=2", true);
        check_decode_define(paired, two_chunks_paired ? "NBITS_CHUNKS=2" : "NBITS_CHUNKS=1", true);
        check_decode_define(single_set, "NBITS_STAGES=2", true);
        check_decode_define(single_set, "NBITS_CHUNKS=2", true);
    }
    check_decode_nodes(paired);
    check_decode_nodes(single_set);
}

TEST_CASE("decode with each step's activations loaded before its weights' wait (NBITS_DECODE_EARLY_ACTS=1) meets the "
          "float64 oracle")
{
    // Every decode case whose activations are not staged with the weights (the define is checked on those that
    // are not), so the RMS-norm prologue's squares, a K of partial steps and both batch tiles are loaded a wait
    // ahead; plus two chunks a lane (both chunks' rows loaded at once), a paired node over a group boundary of
    // a partial last step, and clusters of 2 splitting K.
    const ScopedEnv early(ops::kDecodeEarlyActsEnv, std::string("1"));
    const ScopedEnv loaded(ops::kDecodeStageActsEnv, std::string("0"));
    std::vector<FastestCase> decode = decode_cases();
    decode.push_back(feature_case(DataType::Float16, 16, 4, 32, true, Bias::Plain, false, false, 4096, 1000));
    decode.push_back(feature_case(DataType::BFloat16, 8, 4, 32, false, Bias::None, false, true, 1000, 4000));
    const std::vector<FastestNode> nodes = make_nodes(decode, 0xea710000ull);
    check_decode_define(nodes, "NBITS_EARLY_ACTS=1", true);
    check_decode_nodes(nodes);
    {
        const ScopedEnv two(ops::kDecodeChunksEnv, std::string("2"));
        const std::vector<FastestNode> chunked = {make_node(decode[decode.size() - 2], 0xea720000ull),
                                                  make_node(decode.back(), 0xea720001ull)};
        check_decode_define(chunked, "NBITS_CHUNKS=2", true);
        check_decode_nodes(chunked);
    }
    const ScopedEnv clusters(ops::kDecodeClusterKEnv, std::string("2"));
    check_decode_nodes({make_node(decode.back(), 0xea730000ull)});
}

TEST_CASE("decode with each step's scales and zero points staged with its weights (NBITS_DECODE_STAGE_META=1) meets "
          "the float64 oracle")
{
    // Every decode case the staging applies to (int4 block 32, int8 block 16, 16-bit scales, K blocks a multiple of
    // 4, zero-point rows of whole words) at K = 4096 and one with a partial last step (K = 4224 symmetric), with one
    // and two chunks a lane; the others keep the register loads, which check_decode_define confirms.
    const ScopedEnv staged(ops::kDecodeStageMetaEnv, std::string("1"));
    std::vector<FastestCase> decode;
    for (FastestCase c : decode_cases()) {
        c.k = 4096;
        decode.push_back(c);
    }
    decode.push_back(feature_case(DataType::Float16, 1, 4, 32, false, Bias::Plain, false, false, 1000, 4224));
    decode.push_back(feature_case(DataType::BFloat16, 9, 8, 16, true, Bias::None, false, true, 333, 4096));
    // One scale a chunk index (its block's half of the staged word) and two, each with a partial last step and
    // block: int4 block 128 (32 blocks, 16 zero-point bytes a row), int8 block 64 (64 blocks), int8 block 32.
    decode.push_back(feature_case(DataType::Float16, 1, 4, 128, true, Bias::Plain, false, false, 1000, 4032));
    decode.push_back(feature_case(DataType::BFloat16, 4, 8, 64, true, Bias::Folded, false, false, 1000, 4064));
    decode.push_back(feature_case(DataType::Float16, 1, 8, 32, false, Bias::None, false, true, 1000, 4280));
    std::vector<FastestNode> nodes = make_nodes(decode, 0xc4c40000ull);
    std::vector<FastestNode> staged_nodes;
    std::vector<FastestNode> register_nodes;
    for (FastestNode& node : nodes) {
        const FastestCase& c = node.spec;
        // Exact mode (a 16-byte chunk inside one block) with 16-bit scales, K blocks a multiple of 4 (four scales a
        // chunk index) or 2, zero-point rows of whole words.
        const std::size_t chunk_codes = c.bits == 4 ? 32 : 16;
        ops::MatMulNBitsConfig config;
        config.k = c.k;
        config.n = c.n;
        config.bits = c.bits;
        config.block_size = c.block_size;
        const bool applies = c.block_size >= chunk_codes && !c.f32_scales &&
                             config.k_blocks() % (c.block_size == chunk_codes ? 4 : 2) == 0 &&
                             (!c.zero_points || config.zp_row_bytes() % 4 == 0);
        (applies ? staged_nodes : register_nodes).push_back(std::move(node));
    }
    check_decode_define(staged_nodes, "NBITS_STAGE_META=1", true);
    check_decode_define(register_nodes, "NBITS_STAGE_META=1", false);
    check_decode_nodes(staged_nodes);
    const ScopedEnv two(ops::kDecodeChunksEnv, std::string("2"));
    check_decode_nodes(make_nodes(decode, 0xc4c50000ull));
}

TEST_CASE("decode multiplying offset codes (NBITS_DECODE_OFFSET_CODES=1 and 2) meets the float64 oracle")
{
    // Every decode case, the override applying to int4 blocks of 32 codes and more (check_decode_define confirms
    // where), plus: bf16 and fp16 long-K down projections with zero points (each block's start from two sums) at
    // M = 1 and 16, block 64 (two words a block) and 256 with a partial last step, the paired node with zero
    // points at M = 1 and 9 and in two chunks, and the RMS-norm prologue (the sums over the normalised rows).
    const ScopedEnv offset(ops::kDecodeOffsetCodesEnv, std::string("1"));
    const FastestCase paired_zp = feature_case(DataType::BFloat16, 1, 4, 32, true, Bias::None, false, true, 4000, 4096);
    const std::vector<FastestCase> added = {
        feature_case(DataType::BFloat16, 1, 4, 32, true, Bias::None, false, false, 4096, 18944),
        feature_case(DataType::Float16, 16, 4, 32, true, Bias::Plain, false, false, 4096, 14336),
        feature_case(DataType::BFloat16, 3, 4, 64, false, Bias::Folded, false, false, 1000, 4160),
        feature_case(DataType::Float16, 1, 4, 256, true, Bias::None, false, false, 1000, 4352),
        paired_zp,
        feature_case(DataType::Float16, 9, 4, 128, true, Bias::None, false, true, 1000, 4096),
        feature_case(DataType::BFloat16, 1, 4, 32, false, Bias::None, true, false, 3000, 4096)};
    std::vector<FastestCase> decode = decode_cases();
    decode.insert(decode.end(), added.begin(), added.end());
    std::vector<FastestNode> nodes = make_nodes(decode, 0x0ffc0000ull);
    std::vector<FastestNode> offset_nodes;
    std::vector<FastestNode> plain_nodes;
    for (FastestNode& node : nodes) {
        const bool applies = node.spec.bits == 4 && node.spec.block_size >= 32;
        (applies ? offset_nodes : plain_nodes).push_back(std::move(node));
    }
    check_decode_define(offset_nodes, "NBITS_OFFSET_CODES=1", true);
    check_decode_define(plain_nodes, "NBITS_OFFSET_CODES=1", false);
    check_decode_nodes(offset_nodes);
    {
        const ScopedEnv two(ops::kDecodeChunksEnv, std::string("2"));
        check_decode_nodes({make_node(paired_zp, 0x0ffc1000ull)});
    }
    // 2: the offset's share added after the block's mmas, on the added cases.
    const ScopedEnv after(ops::kDecodeOffsetCodesEnv, std::string("2"));
    const std::vector<FastestNode> after_nodes = make_nodes(added, 0x0ffc2000ull);
    check_decode_define(after_nodes, "NBITS_OFFSET_CODES=2", true);
    check_decode_nodes(after_nodes);
}

TEST_CASE("decode with the rows of A and the scales staged together (the plan at M = 2..8 for two column tiles and "
          "the paired node of one chunk) meets the float64 oracle")
{
    // Every decode case at K = 4096 with both forced, and the nodes the plan stages both on by itself: two tiles of
    // one weight set (N = 8192, so that the 32-column groups fill the SMs) and the paired node up to K = 4096, at
    // M = 2 and 8, fp16 and bf16, with and without zero points, bias and folded bias; check_decode_define confirms
    // the plan's choice.
    std::vector<FastestCase> planned;
    std::uint64_t seed = 0xc6c60000ull;
    for (const DataType activation : {DataType::Float16, DataType::BFloat16}) {
        for (const std::size_t m : {std::size_t{2}, std::size_t{8}}) {
            const bool zp = m == 8;
            planned.push_back(feature_case(activation, m, 4, 32, zp, zp ? Bias::Folded : Bias::Plain, false, false,
                                           8192, 1024));
            planned.push_back(feature_case(activation, m, 4, 32, !zp, Bias::None, false, true, 1000, 3072));
        }
    }
    const std::vector<FastestNode> planned_nodes = make_nodes(planned, seed);
    check_decode_define(planned_nodes, "NBITS_STAGE_ACTS=1", true);
    check_decode_define(planned_nodes, "NBITS_STAGE_META=1", true);
    check_decode_nodes(planned_nodes);
    const ScopedEnv acts(ops::kDecodeStageActsEnv, std::string("1"));
    const ScopedEnv meta(ops::kDecodeStageMetaEnv, std::string("1"));
    std::vector<FastestCase> decode;
    for (FastestCase c : decode_cases()) {
        c.k = 4096;
        decode.push_back(c);
    }
    check_decode_nodes(make_nodes(decode, seed + planned.size()));
}

TEST_CASE("a Fastest run writes every element of Y, also for outputs that are not a whole tile")
{
    for (const std::size_t m : {std::size_t{1}, std::size_t{7}, std::size_t{19}, std::size_t{150}}) {
        FastestCase c;
        c.m = m;
        c.k = 264;
        c.n = 13;
        CAPTURE(c.describe());
        const Outcome outcome = run_case(c, 42 + m);
        CHECK(outcome.error.all_finite);
        CHECK(within_oracle_bound(outcome.error, 1e-3f));
    }
}

TEST_CASE("each Fastest entry and route runs once: the compute-sanitizer set")
{
    std::vector<FastestCase> set;
    auto add = [&](DataType activation, std::size_t m, std::size_t bits, std::size_t block_size, bool zp, Bias bias,
                   bool gamma, bool gate_up) {
        set.push_back(feature_case(activation, m, bits, block_size, zp, bias, gamma, gate_up, 157));
    };
    add(DataType::Float16, 1, 4, 32, true, Bias::Folded, false, false);     // decode
    add(DataType::BFloat16, 9, 8, 64, true, Bias::PerToken, true, false);   // decode, two batch tiles, RMS norm
    add(DataType::Float16, 3, 4, 128, false, Bias::None, true, true);       // decode gate/up
    add(DataType::Float32, 1, 4, 32, true, Bias::Plain, false, false);      // decode on CUDA cores
    add(DataType::Float16, 40, 4, 16, true, Bias::PerToken, true, false);   // fused prefill, RMS rows
    add(DataType::BFloat16, 24, 4, 32, false, Bias::None, false, true);     // fused prefill gate/up
    add(DataType::Float16, 150, 8, 32, true, Bias::PerToken, false, false);  // dequantise + cuBLASLt, bias rows
    add(DataType::BFloat16, 140, 4, 64, false, Bias::None, true, true);      // dequantise + cuBLASLt, fp32 SwiGLU
    add(DataType::Float16, 130, 4, 32, true, Bias::Plain, false, false);    // wgmma on sm_90
    set.back().n = 6500;
    add(DataType::BFloat16, 200, 8, 16, false, Bias::None, true, true);     // wgmma gate/up on sm_90
    set.back().n = 3300;
    add(DataType::Float16, 130, 4, 32, false, Bias::Folded, false, false);  // wgmma split over a cluster of 3
    set.back().n = 6500;
    const std::size_t split_node = set.size() - 1;
    add(DataType::Float16, 65, 4, 32, true, Bias::Plain, false, false);     // 256-row wgmma, clusters of 4
    set.back().n = 6400;
    const std::size_t wide_node = set.size() - 1;
    add(DataType::BFloat16, 48, 4, 32, true, Bias::PerToken, false, false);  // 64-token wgmma (WGMMA_MIN_M)
    set.back().n = 13000;
    const std::size_t small_m_node = set.size() - 1;
    add(DataType::Float16, 100, 4, 32, true, Bias::Plain, false, false);  // two rows of 64-token tiles, split 2
    set.back().n = 6500;
    const std::size_t two_rows_node = set.size() - 1;
    add(DataType::Float16, 300, 4, 32, true, Bias::Plain, false, false);  // 256-token wgmma (WGMMA_TILE_M)
    set.back().n = 6500;
    const std::size_t tall_node = set.size() - 1;
    add(DataType::Float16, 8, 4, 32, true, Bias::Plain, false, false);  // decode, K over clusters of 4 on sm_90
    set.back().k = 4096;
    add(DataType::BFloat16, 12, 4, 32, false, Bias::None, true, true);  // decode gate/up + RMS norm, clusters of 4
    set.back().k = 4096;
    // The fused GEMM on 128-row tiles of 16 and 32 tokens (sm_90 at M = 12..32, 212 tiles: four fifths of the
    // H200's CTA slots); the decode kernel and the 64-row tiles elsewhere.
    add(DataType::Float16, 16, 4, 32, false, Bias::Plain, false, false);
    set.back().n = 27136;
    set.back().k = 256;
    add(DataType::BFloat16, 32, 4, 32, false, Bias::Folded, false, false);
    set.back().n = 27100;
    set.back().k = 264;
    // The wgmma GEMM fed by the tensor memory accelerator (NBITS_PREFILL_TMA=1): 128-token tiles whose thread 0
    // issues the copies, 256-token paired tiles with a warpgroup of producers, 64-token tiles (a producer warp)
    // split over a cluster of 2.
    const std::size_t first_tma_node = set.size();
    add(DataType::Float16, 130, 4, 32, true, Bias::Plain, false, false);
    set.back().n = 6500;
    add(DataType::BFloat16, 300, 4, 64, false, Bias::None, false, true);
    set.back().n = 3300;
    const std::size_t tall_tma_node = set.size() - 1;
    add(DataType::Float16, 40, 8, 32, true, Bias::Folded, false, false);
    set.back().n = 13000;
    const std::size_t short_tma_node = set.size() - 1;
    // The stream-K grid (NBITS_PREFILL_STREAM_K=1): tiles summed from the partials of up to four CTAs; the
    // paired node with an RMS-norm pass before it.
    add(DataType::BFloat16, 300, 4, 32, true, Bias::Plain, false, false);
    set.back().n = 6500;
    const std::size_t stream_k_node = set.size() - 1;
    add(DataType::Float16, 260, 8, 16, true, Bias::None, true, true);
    set.back().n = 3300;
    add(DataType::Float16, 100, 4, 32, false, Bias::Plain, false, false);  // the 128-token tiles
    set.back().n = 6500;
    add(DataType::BFloat16, 48, 4, 64, true, Bias::None, false, true);  // the 64-token tiles
    set.back().n = 3300;
    std::uint64_t seed = 0x5a17;
    for (std::size_t i = 0; i < set.size(); ++i) {
        const FastestCase& c = set[i];
        CAPTURE(c.describe());
        const ScopedEnv split(ops::kPrefillSplitKEnv, i == split_node       ? std::optional<std::string>("3")
                                                      : i == wide_node      ? std::optional<std::string>("4")
                                                      : i == short_tma_node ? std::optional<std::string>("2")
                                                      : i == two_rows_node  ? std::optional<std::string>("2")
                                                                            : std::nullopt);
        const ScopedEnv rows(ops::kPrefillWgmmaTileNEnv,
                             i == wide_node ? std::optional<std::string>("256") : std::nullopt);
        const ScopedEnv min_m(ops::kPrefillWgmmaMinMEnv,
                              i == small_m_node || i == short_tma_node ? std::optional<std::string>("17")
                                                                       : std::nullopt);
        const ScopedEnv tokens(ops::kPrefillWgmmaTileMEnv, i == tall_node || i == tall_tma_node
                                                               ? std::optional<std::string>("256")
                                                           : i == two_rows_node ? std::optional<std::string>("64")
                                                                                : std::nullopt);
        const ScopedEnv tma(ops::kPrefillTmaEnv,
                            i >= first_tma_node ? std::optional<std::string>("1") : std::nullopt);
        const ScopedEnv stream_k(ops::kPrefillStreamKEnv,
                                 i >= stream_k_node ? std::optional<std::string>("1") : std::nullopt);
        const Outcome outcome = run_case(c, seed++);
        CAPTURE(outcome.variant);
        CHECK(outcome.error.all_finite);
        CHECK(outcome.error.max_abs <= std::max(2e-2f * outcome.error.max_out, 1e-3f));
        if (i >= first_tma_node && matmul_gpu().capabilities().sm() == 90) {
            CHECK((i >= stream_k_node ? outcome.stream_k : outcome.tma));
        }
    }
}

TEST_CASE("decode and prefill kernels launched as programmatic dependents read A only after the kernel before "
          "them wrote it, eager and in a CUDA graph")
{
    CudaRuntime& runtime = matmul_gpu();
    const bool overlapping = runtime.capabilities().compute_major >= 9;
    struct Chain {
        std::size_t m, bits, n1, k1, n2, k2;
    };
    // Decode: the first node's CTAs loop over many column groups, so that the second node's CTAs start on SMs
    // where the first one's are done while the rest still write Y1, the second node's A; int8 too, whose
    // programmatic launches reserve shared memory to keep their CTAs spread over the SMs. Prefill (sm_90): the
    // wgmma GEMM in clusters of 4 then the mma.sync GEMM in clusters of 2 (M = 64); the TMA-fed GEMM then a
    // stream-K grid, whose flags are zeroed between the two (M = 200).
    for (const Chain& chain : {Chain{1, 4, 24000, 4096, 3000, 24000}, Chain{9, 4, 24000, 4096, 3000, 24000},
                               Chain{1, 8, 24000, 4096, 3000, 24000}, Chain{64, 4, 8192, 2048, 2048, 8192},
                               Chain{200, 4, 8192, 1024, 2048, 8192}}) {
        const std::size_t m = chain.m;
        const std::size_t bits = chain.bits;
        FastestCase first =
            feature_case(DataType::Float16, m, bits, 32, false, Bias::None, false, false, chain.n1, chain.k1);
        FastestCase second =
            feature_case(DataType::Float16, m, bits, 32, true, Bias::Plain, false, false, chain.n2, chain.k2);
        CAPTURE(first.describe());
        CAPTURE(second.describe());
        const FastestNode producer = make_node(first, 0xc0a5 + m);
        const DeviceTensors producer_inputs(runtime, producer.inputs);
        DeviceOutput y1(runtime, DataType::Float16, {m, first.n});
        const std::unique_ptr<ops::MatMulNBits> op1 = fastest_operator(producer);
        const RunOutcome alone = run_into(*op1, producer_inputs.tensors(), y1);
        REQUIRE(within_oracle_bound(oracle_error(output_values(DataType::Float16, alone.bytes), producer.expected),
                                    1e-3f));
        CHECK(std::get<ops::KernelStep>(alone.plan.steps.at(0)).config.programmatic_dependent == overlapping);

        // The consumer's expectation from the Y1 the producer writes (its reduction order is fixed).
        const std::vector<float> a2 = output_values(DataType::Float16, alone.bytes);
        const FastestNode consumer = make_node(second, 0xc0b5 + m, &a2);
        const DeviceTensors consumer_inputs(runtime, consumer.inputs);
        std::vector<Tensor> chained = consumer_inputs.tensors();
        chained[0] = y1.tensor();
        DeviceOutput y2(runtime, DataType::Float16, {m, second.n});
        const std::unique_ptr<ops::MatMulNBits> op2 = fastest_operator(consumer);
        // Every kernel of the consumer but the stream-K flags' zeroing waits on the kernel before it.
        for (const ops::PlanStep& step : fastest_plan(consumer).steps) {
            if (const auto* kernel = std::get_if<ops::KernelStep>(&step)) {
                CAPTURE(kernel->entry);
                CHECK(kernel->config.programmatic_dependent == (overlapping && kernel->entry != "nbits_zero_words"));
            }
        }

        auto check_chain = [&](const char* how) {
            CAPTURE(how);
            CHECK(y1.bytes() == alone.bytes);
            const OracleError error = oracle_error(output_values(DataType::Float16, y2.bytes()), consumer.expected);
            CAPTURE(error.describe());
            CHECK(within_oracle_bound(error, 1e-3f));
        };
        for (int round = 0; round < 3; ++round) {
            y1.poison();
            y2.poison();
            op1->run(producer_inputs.tensors(), {y1.tensor()});
            op2->run(chained, {y2.tensor()});
            runtime.synchronize();
            check_chain("eager");
        }
        CapturedGraph graph(runtime, [&] {
            op1->run(producer_inputs.tensors(), {y1.tensor()});
            op2->run(chained, {y2.tensor()});
        });
        for (int round = 0; round < 3; ++round) {
            y1.poison();
            y2.poison();
            graph.replay();
            runtime.synchronize();
            check_chain("graph");
        }
    }
}

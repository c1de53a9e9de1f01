// The operator under measurement: each node's tensors (host data from the
// shared float64 reference's generator, weights rotated on the device), the
// checked eager run, the timed rows under every policy, the host overhead of
// eager run() beside bare launches of the same steps, and --plan.

#include "bench.hpp"

#include "blas/gemm.hpp"
#include "cuda/driver.hpp"
#include "host_reference.hpp"
#include "runtime/internals.hpp"
#include "runtime/kernel_args.hpp"

#include "nbits/error.hpp"
#include "nbits/nbits.hpp"

#include "json_writer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <iostream>
#include <random>

namespace nbits::bench {
namespace {

using ScopedContext = CudaRuntime::Internals::ScopedContext;

// ------------------------------------------------------------------- node ---

enum class Role { Activation, Packed, Scales, ZeroPoints, GroupIndex, Bias, Gamma };

// One input slot. `projection` tells the paired node's gate (0) and up (1)
// weights apart; a slot the node leaves empty has desc.present == false.
struct Slot {
    Role role = Role::Activation;
    int projection = 0;
    TensorDesc desc;

    // Weights, scales and zero points are rotated across copies so that each
    // launch reads them from DRAM; the rest is shared by every launch.
    bool rotated() const
    {
        return desc.present && (role == Role::Packed || role == Role::Scales || role == Role::ZeroPoints);
    }
};

struct Node {
    BenchShape shape;
    PathConfig path;
    NodeAttributes attributes;
    std::vector<Slot> inputs;  // trailing empty slots dropped
    TensorDesc output;

    std::size_t k_blocks() const { return (shape.k + path.block_size - 1) / path.block_size; }
    std::size_t blob_size() const { return static_cast<std::size_t>(path.block_size * path.bits / 8); }
    std::size_t zp_row_bytes() const { return (k_blocks() * path.bits + 7) / 8; }
    int projections() const { return shape.paired() ? 2 : 1; }

    std::vector<TensorDesc> input_descs() const
    {
        std::vector<TensorDesc> descs;
        for (const Slot& slot : inputs) {
            descs.push_back(slot.desc);
        }
        return descs;
    }

    // Every present input read once and the output written once.
    std::uint64_t minimum_bytes() const
    {
        std::uint64_t bytes = output.byte_size();
        for (const Slot& slot : inputs) {
            bytes += slot.desc.present ? slot.desc.byte_size() : 0;
        }
        return bytes;
    }

    double flops() const
    {
        return 2.0 * static_cast<double>(shape.m) * static_cast<double>(shape.k) *
               static_cast<double>(shape.weight_columns());
    }
};

Slot slot(Role role, int projection, DataType dtype, std::vector<std::size_t> shape)
{
    Slot s;
    s.role = role;
    s.projection = projection;
    s.desc.dtype = dtype;
    s.desc.shape = std::move(shape);
    return s;
}

Slot empty_slot(Role role, DataType dtype)
{
    Slot s = slot(role, 0, dtype, {});
    s.desc.present = false;
    return s;
}

Node make_node(const BenchShape& shape, const PathConfig& path)
{
    if (shape.paired() && path.activation == DataType::Float32) {
        throw Error(ErrorKind::Unsupported, "the paired gate/up node takes fp16 or bf16 activations; use "
                                            "--proj gateup_unpaired for f32");
    }
    Node node;
    node.shape = shape;
    node.path = path;
    NodeAttributes& a = node.attributes;
    a.set("K", static_cast<std::int64_t>(shape.k))
        .set("N", static_cast<std::int64_t>(shape.n))
        .set("bits", static_cast<std::int64_t>(path.bits))
        .set("block_size", static_cast<std::int64_t>(path.block_size))
        .set("accuracy_level", static_cast<std::int64_t>(path.accuracy_level));
    if (shape.paired()) {
        a.set(ops::kGateUpSwigluAttr, std::int64_t{1});
    }
    if (path.rmsnorm_prologue) {
        a.set(ops::kRmsNormPrologueAttr, std::int64_t{1});
        a.set(ops::kRmsNormEpsilonAttr, path.rmsnorm_epsilon);
    }
    if (path.bias == BiasMode::Folded && !shape.paired()) {
        a.set(ops::kFoldedBiasAttr, std::int64_t{1});
    }

    const DataType act = path.activation;
    const Slot activation = slot(Role::Activation, 0, act, {shape.m, shape.k});
    const auto packed = [&](int p) {
        return slot(Role::Packed, p, DataType::Uint8, {shape.n, node.k_blocks(), node.blob_size()});
    };
    const auto scales = [&](int p) { return slot(Role::Scales, p, path.scales, {shape.n, node.k_blocks()}); };
    const auto zero_points = [&](int p) {
        return path.zero_points ? slot(Role::ZeroPoints, p, DataType::Uint8, {shape.n, node.zp_row_bytes()})
                                : empty_slot(Role::ZeroPoints, DataType::Uint8);
    };
    const Slot gamma =
        path.rmsnorm_prologue ? slot(Role::Gamma, 0, path.gamma(), {shape.k}) : empty_slot(Role::Gamma, path.gamma());
    if (shape.paired()) {
        // [x, W_gate, scales_gate, W_up, scales_up, (gamma), (zp_gate), (zp_up)]
        node.inputs = {activation, packed(0), scales(0), packed(1), scales(1), gamma, zero_points(0), zero_points(1)};
    } else {
        // [A, B, scales, zero_points, g_idx, bias, gamma]
        const Slot bias = path.bias != BiasMode::None ? slot(Role::Bias, 0, act, {shape.n}) : empty_slot(Role::Bias, act);
        node.inputs = {activation, packed(0), scales(0), zero_points(0), empty_slot(Role::GroupIndex, DataType::Int32),
                       bias, gamma};
    }
    while (!node.inputs.empty() && !node.inputs.back().desc.present) {
        node.inputs.pop_back();
    }
    node.output.dtype = act;
    node.output.shape = {shape.m, shape.n};
    return node;
}

// -------------------------------------------------------------- host data ---

std::uint64_t mix_seed(std::uint64_t seed, const std::string& key)
{
    std::uint64_t z = seed ^ std::hash<std::string>{}(key);
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

std::uint64_t node_seed(std::uint64_t run_seed, const BenchShape& shape)
{
    return mix_seed(run_seed, fmt::format("{}/{}/{}", shape.label(), shape.k, shape.n));
}

std::vector<std::size_t> sampled_columns(std::size_t n);

// A node's weights (one, or gate and up), drawn once and shared by every M.
struct HostWeights {
    std::vector<test::QuantizedWeights> projections;
};

// Outputs of about this size at most: the paired node's fp16 product of two
// stays far from overflow.
constexpr float kLargestOutput = 8.0f;

// The data of the original's parity tests, drawn by their generator in their
// order (codes, zero points, scales per projection): codes round(unit() * max)
// packed block-wise, scales in [0.015, 0.02]. Its activations are never
// positive, so outputs share an offset that grows with K; one factor on every
// scale brings the largest output of a probe row near kLargestOutput. The
// check is relative to the largest output, so the factor leaves it as the
// original's bound for every linear path.
HostWeights make_weights(const Node& node, std::uint64_t seed)
{
    test::Lcg lcg(seed);
    const int top = node.path.bits == 8 ? 255 : 15;
    HostWeights weights;
    for (int p = 0; p < node.projections(); ++p) {
        test::QuantizedWeights w;
        w.k = node.shape.k;
        w.n = node.shape.n;
        w.bits = static_cast<std::size_t>(node.path.bits);
        w.block_size = static_cast<std::size_t>(node.path.block_size);
        const std::size_t padded_k = w.k_blocks() * w.block_size;
        w.packed = test::pack_codes(lcg.codes(w.n * padded_k, top), w.n, padded_k, w.block_size, w.bits);
        if (node.path.zero_points) {
            const std::vector<std::uint8_t> codes = lcg.codes(w.n * w.k_blocks(), top);
            w.zero_points = w.bits == 8 ? codes : test::pack_int4_zero_points(codes, w.n, w.k_blocks());
        }
        w.scales = lcg.scales(w.n * w.k_blocks());
        weights.projections.push_back(std::move(w));
    }

    test::Lcg probe_lcg(seed ^ 0x5EEDull);
    const std::vector<float> probe = probe_lcg.floats(node.shape.k);
    test::OracleNode oracle;
    oracle.activation = &probe;
    oracle.m = 1;
    float largest = 0.0f;
    for (const test::QuantizedWeights& w : weights.projections) {
        oracle.weights = &w;
        for (const float y : test::oracle_at(oracle, {0}, sampled_columns(node.shape.n))) {
            largest = std::max(largest, std::fabs(y));
        }
    }
    const float factor = largest > kLargestOutput ? kLargestOutput / largest : 1.0f;
    for (test::QuantizedWeights& w : weights.projections) {
        for (float& scale : w.scales) {
            scale *= factor;
        }
        w.scales = test::stored_values(node.path.scales, w.scales);
    }
    return weights;
}

// A node's per-M data: the values the kernels read, as stored.
struct HostRows {
    std::vector<float> activation;
    std::vector<float> bias;
    std::vector<float> gamma;
};

HostRows make_rows(const Node& node, std::uint64_t seed)
{
    test::Lcg lcg(seed);
    HostRows rows;
    rows.activation = test::stored_values(node.path.activation, lcg.floats(node.shape.m * node.shape.k));
    for (const Slot& s : node.inputs) {
        if (s.desc.present && s.role == Role::Bias) {
            rows.bias = test::stored_values(s.desc.dtype, lcg.floats(node.shape.n));
        }
        if (s.desc.present && s.role == Role::Gamma) {
            rows.gamma = test::stored_values(s.desc.dtype, lcg.gammas(node.shape.k));
        }
    }
    return rows;
}

test::HostTensor host_tensor(const Slot& s, const HostWeights& weights, const HostRows& rows)
{
    // Only the weight slots have a projection; the per-M slots come with no weights.
    auto projection = [&]() -> const test::QuantizedWeights& {
        return weights.projections.at(static_cast<std::size_t>(s.projection));
    };
    switch (s.role) {
    case Role::Activation: return test::HostTensor::real(s.desc.dtype, s.desc.shape, rows.activation);
    case Role::Packed: return projection().packed_tensor();
    case Role::Scales: return projection().scales_tensor(s.desc.dtype);
    case Role::ZeroPoints: return projection().zero_points_tensor();
    case Role::Bias: return test::HostTensor::real(s.desc.dtype, s.desc.shape, rows.bias);
    case Role::Gamma: return test::HostTensor::real(s.desc.dtype, s.desc.shape, rows.gamma);
    case Role::GroupIndex: break;
    }
    throw Error(ErrorKind::Internal, "nbits-bench never binds g_idx");
}

// ------------------------------------------------------------ device data ---

// The rotated slots of a node, `copies` times over in one buffer.
class DeviceWeights {
public:
    DeviceWeights(CudaRuntime& runtime, const Node& node, const HostWeights& weights, std::size_t copies)
        : copies_(std::max<std::size_t>(copies, 1)), offsets_(node.inputs.size(), 0)
    {
        for (std::size_t i = 0; i < node.inputs.size(); ++i) {
            if (node.inputs[i].rotated()) {
                offsets_[i] = stride_;
                stride_ += aligned(node.inputs[i].desc.byte_size());
            }
        }
        if (stride_ == 0) {
            return;
        }
        buffer_ = DeviceBuffer(runtime, stride_ * copies_);
        for (std::size_t i = 0; i < node.inputs.size(); ++i) {
            if (node.inputs[i].rotated()) {
                const test::HostTensor host = host_tensor(node.inputs[i], weights, {});
                runtime.htod(buffer_.get() + offsets_[i], host.bytes.data(), host.bytes.size());
                // Its alignment padding zeroed, so that tiling the copies reads no uninitialised byte
                // (compute-sanitizer's initcheck); tile_device waits for the stream first.
                const std::size_t padding = aligned(node.inputs[i].desc.byte_size()) - host.bytes.size();
                if (padding > 0) {
                    runtime.memset_async(buffer_.get() + offsets_[i] + host.bytes.size(), 0, padding);
                }
            }
        }
        tile_device(runtime, buffer_.get(), stride_, stride_ * copies_);
    }

    static std::size_t bytes_per_copy(const Node& node)
    {
        std::size_t bytes = 0;
        for (const Slot& s : node.inputs) {
            bytes += s.rotated() ? aligned(s.desc.byte_size()) : 0;
        }
        return bytes;
    }

    CUdeviceptr at(std::size_t slot_index, std::size_t copy) const
    {
        return buffer_.get() + (copy % copies_) * stride_ + offsets_[slot_index];
    }

private:
    std::size_t copies_ = 1;
    std::size_t stride_ = 0;
    std::vector<std::size_t> offsets_;
    DeviceBuffer buffer_;
};

// The per-M slots (activation, bias, gamma) and the output of one node.
class DeviceRows {
public:
    DeviceRows(CudaRuntime& runtime, const Node& node, const HostRows& rows) : offsets_(node.inputs.size(), 0)
    {
        std::size_t bytes = 0;
        for (std::size_t i = 0; i < node.inputs.size(); ++i) {
            if (node.inputs[i].desc.present && !node.inputs[i].rotated()) {
                offsets_[i] = bytes;
                bytes += aligned(node.inputs[i].desc.byte_size());
            }
        }
        shared_ = DeviceBuffer(runtime, std::max<std::size_t>(bytes, 1));
        output_ = DeviceBuffer(runtime, std::max<std::size_t>(node.output.byte_size(), 1));
        for (std::size_t i = 0; i < node.inputs.size(); ++i) {
            if (node.inputs[i].desc.present && !node.inputs[i].rotated()) {
                const test::HostTensor host = host_tensor(node.inputs[i], {}, rows);
                runtime.htod(shared_.get() + offsets_[i], host.bytes.data(), host.bytes.size());
            }
        }
    }

    CUdeviceptr at(std::size_t slot_index) const { return shared_.get() + offsets_[slot_index]; }
    CUdeviceptr output() const { return output_.get(); }

private:
    std::vector<std::size_t> offsets_;
    DeviceBuffer shared_;
    DeviceBuffer output_;
};

std::vector<Tensor> bind_inputs(const Node& node, const DeviceWeights& weights, const DeviceRows& rows,
                                std::size_t copy)
{
    std::vector<Tensor> tensors;
    tensors.reserve(node.inputs.size());
    for (std::size_t i = 0; i < node.inputs.size(); ++i) {
        Tensor tensor;
        static_cast<TensorDesc&>(tensor) = node.inputs[i].desc;
        if (node.inputs[i].desc.present) {
            tensor.data = node.inputs[i].rotated() ? weights.at(i, copy) : rows.at(i);
        }
        tensors.push_back(std::move(tensor));
    }
    return tensors;
}

std::vector<Tensor> bind_outputs(const Node& node, const DeviceRows& rows)
{
    Tensor output;
    static_cast<TensorDesc&>(output) = node.output;
    output.data = rows.output();
    return {output};
}

// NaN in every format nbits writes, so that an unwritten element shows.
void poison(CudaRuntime& runtime, const Node& node, const DeviceRows& rows)
{
    runtime.memset_async(rows.output(), 0xFF, node.output.byte_size());
    runtime.synchronize();
}

std::vector<std::uint8_t> download(CudaRuntime& runtime, const Node& node, const DeviceRows& rows)
{
    std::vector<std::uint8_t> bytes(node.output.byte_size());
    runtime.dtoh(bytes.data(), rows.output(), bytes.size());
    return bytes;
}

// ------------------------------------------------------------------ check ---

constexpr std::size_t kSampledColumns = 64;

// First, middle and last rows: the ends catch off-by-one row strides.
std::vector<std::size_t> sampled_rows(std::size_t m)
{
    std::vector<std::size_t> rows = {0, m / 2, m - 1};
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    return rows;
}

// Evenly spread, the first and the last included.
std::vector<std::size_t> sampled_columns(std::size_t n)
{
    const std::size_t count = std::min(n, kSampledColumns);
    std::vector<std::size_t> columns(count);
    for (std::size_t i = 0; i < count; ++i) {
        columns[i] = count == 1 ? 0 : i * (n - 1) / (count - 1);
    }
    return columns;
}

// The bound a path is held to: the original's parity bound (max_abs below
// max(max_out * relative, 1e-3), max_rel below 5e-2) with its relative factor
// for int4 (1e-3) and int8 or f32 (2e-3) GEMVs, and 4e-3 with the RMS-norm
// prologue, which rounds the normalized row to fp16. Relative alone (no
// max_rel) where an element near zero may carry an error that is small only
// against the largest output: 4e-3 for the gate/up SwiGLU (silu(gate) * up
// near zero with a large up; the original validated it bit-exact, never
// against float64), 2e-2 for bf16 (8-bit mantissas) and for int8-quantized
// f32 activations (accuracy level 4).
struct Bound {
    double relative = 1e-3;
    bool max_rel = true;
};

Bound bound_for(const Node& node)
{
    const PathConfig& path = node.path;
    if (path.activation == DataType::BFloat16) {
        return {2e-2, false};
    }
    if (path.activation == DataType::Float32) {
        return path.accuracy_level == 4 && path.bits == 4 ? Bound{2e-2, false} : Bound{2e-3, true};
    }
    if (node.shape.paired()) {
        return {4e-3, false};
    }
    if (path.rmsnorm_prologue) {
        return {4e-3, true};
    }
    return {path.bits == 8 ? 2e-3 : 1e-3, true};
}

Check check_output(const Node& node, const HostWeights& weights, const HostRows& rows,
                   const std::vector<std::uint8_t>& output)
{
    const std::vector<float> values = test::real_values(node.output.dtype, output);
    Check check;
    for (const float value : values) {
        check.non_finite += std::isfinite(value) ? 0 : 1;
    }
    const std::vector<std::size_t> row_list = sampled_rows(node.shape.m);
    const std::vector<std::size_t> columns = sampled_columns(node.shape.n);
    test::OracleNode oracle;
    oracle.activation = &rows.activation;
    oracle.m = node.shape.m;
    oracle.weights = &weights.projections[0];
    oracle.up = node.shape.paired() ? &weights.projections[1] : nullptr;
    oracle.bias = rows.bias.empty() ? nullptr : &rows.bias;
    oracle.gamma = rows.gamma.empty() ? nullptr : &rows.gamma;
    oracle.epsilon = node.path.rmsnorm_epsilon;
    const std::vector<float> expected = test::oracle_at(oracle, row_list, columns);
    std::vector<float> got;
    for (const std::size_t row : row_list) {
        for (const std::size_t column : columns) {
            got.push_back(values[row * node.shape.n + column]);
        }
    }
    test::OracleError error = test::oracle_error(got, expected);
    error.all_finite = error.all_finite && check.non_finite == 0;
    const Bound bound = bound_for(node);
    check.max_abs = error.max_abs;
    check.max_rel = error.max_rel;
    check.max_out = error.max_out;
    check.relative = bound.relative;
    check.bound = test::oracle_bound(error, static_cast<float>(bound.relative));
    check.values = got.size();
    check.passed = bound.max_rel ? test::within_oracle_bound(error, static_cast<float>(bound.relative))
                                 : error.all_finite && error.max_abs < check.bound;
    check.max_rel_limited = bound.max_rel;
    return check;
}

// --------------------------------------------------------------- the rows ---

std::vector<std::string> step_names(const ops::LaunchPlan& plan)
{
    std::vector<std::string> names;
    for (const ops::PlanStep& step : plan.steps) {
        const auto* kernel = std::get_if<ops::KernelStep>(&step);
        names.push_back(kernel != nullptr ? kernel->entry : std::string("cublasLt"));
    }
    return names;
}

// Unsupported is a policy's honest "no kernel for this node", not a failure.
// The original operator has no bf16 path at all: it rejects bf16 activations
// as an f32 node's wrong dtype, which under Original means the same.
void record_error(Status& status, std::string& error, const std::exception& caught, const PathConfig& path,
                  KernelPolicy policy)
{
    const auto* nbits_error = dynamic_cast<const Error*>(&caught);
    const bool unsupported = nbits_error != nullptr && nbits_error->kind() == ErrorKind::Unsupported;
    const bool original_bf16 = nbits_error != nullptr && nbits_error->kind() == ErrorKind::InvalidArgument &&
                               path.activation == DataType::BFloat16 && policy == KernelPolicy::Original;
    status = unsupported || original_bf16 ? Status::Unsupported : Status::Failed;
    error = original_bf16 ? std::string("the original operator has no bf16 path: ") + caught.what() : caught.what();
}

// After a failed row, whether the context still works: an illegal address
// poisons it for good, and every later row would fail the same way.
bool context_usable(CudaRuntime& runtime, std::string& why)
{
    try {
        runtime.synchronize();
        return true;
    } catch (const std::exception& error) {
        why = error.what();
        return false;
    }
}

struct Session {
    std::shared_ptr<CudaRuntime> runtime;
    const BenchOptions& options;
    const DeviceFacts& device;
    std::uint64_t seed = 0;
    std::string broken;  // why the context failed, once it has
    std::size_t done = 0;
    std::size_t total = 0;
};

std::string where(const BenchShape& shape)
{
    return fmt::format("{} M={} K={} N={}", shape.label(), shape.m, shape.k, shape.n);
}

void progress(Session& session, const Row& row)
{
    ++session.done;
    std::string line = fmt::format("[{}/{}] {} {}: ", session.done, session.total, where(row.shape),
                                   row.configuration().name());
    if (row.status != Status::Ok) {
        line += fmt::format("{}: {}", to_string(row.status), row.error);
    } else {
        line += fmt::format("{} {:.2f} us ({} x{}), max_abs {:.2e} of bound {:.2e}", row.variant, row.us(),
                            row.timing->method, row.timing->launches, row.check->max_abs, row.check->bound);
    }
    std::cerr << line << "\n";
}

std::optional<Check> checked(Session& session, const Node& node, const HostWeights& weights, const HostRows& rows,
                             const DeviceRows& device, Status& status, std::string& error)
{
    const Check check = check_output(node, weights, rows, download(*session.runtime, node, device));
    if (!check.passed) {
        status = Status::Failed;
        error = "output check failed: " + check.summary();
    }
    return check;
}

Row measure_row(Session& session, const Node& node, const HostWeights& host_weights, const HostRows& host_rows,
                const DeviceWeights& weights, const DeviceRows& rows, const Rotation& rotation,
                const Configuration& configuration)
{
    CudaRuntime& runtime = *session.runtime;
    Row row;
    row.shape = node.shape;
    row.policy = configuration.policy;
    row.overrides = configuration.overrides;
    row.bytes = node.minimum_bytes();
    row.flops = node.flops();
    try {
        ops::MatMulNBits op(session.runtime, node.attributes,
                            MatMulNBitsOptions{configuration.policy, session.options.plan_overrides(configuration)});
        const std::vector<Tensor> outputs = bind_outputs(node, rows);
        const std::size_t scratch = op.workspace_bytes(node.input_descs(), {node.output});
        const DeviceBuffer workspace = scratch > 0 ? DeviceBuffer(runtime, scratch) : DeviceBuffer();
        const RunOptions run_options{runtime.stream(), workspace.get(), scratch};

        // The eager run JIT-compiles every entry the plan needs, so no compile
        // lands in a capture or a timed sample; it is also the run the check reads.
        poison(runtime, node, rows);
        const std::shared_ptr<const ops::LaunchPlan> plan =
            op.run(bind_inputs(node, weights, rows, 0), outputs, run_options);
        runtime.synchronize();
        row.variant = plan->variant;
        row.reason = plan->reason();
        row.steps = step_names(*plan);
        row.capture_safe = plan->capture_safe;
        row.check = checked(session, node, host_weights, host_rows, rows, row.status, row.error);
        if (!row.check->passed) {
            return row;
        }
        const Enqueue enqueue = [&](std::size_t index) {
            op.run(bind_inputs(node, weights, rows, index), outputs, run_options);
        };
        std::string note;
        row.timing = time_row(runtime, enqueue, node.shape.regime, plan->capture_safe, rotation,
                              session.options.method, note);
        for (const std::string& line : {note, rotation.shortfall()}) {
            if (!line.empty()) {
                row.notes.push_back(line);
            }
        }
        row.status = Status::Ok;
    } catch (const std::exception& error) {
        record_error(row.status, row.error, error, node.path, configuration.policy);
    }
    return row;
}

Row unmeasured(const BenchShape& shape, const Configuration& configuration, Status status, const std::string& error)
{
    Row row;
    row.shape = shape;
    row.policy = configuration.policy;
    row.overrides = configuration.overrides;
    row.status = status;
    row.error = error;
    return row;
}

// Every M of one node under every configuration: the weights are drawn and uploaded
// once, then each M gets its activations; dense runs after nbits' buffers are gone.
void measure_node(Session& session, const std::vector<BenchShape>& shapes, std::vector<Row>& out)
{
    CudaRuntime& runtime = *session.runtime;
    const std::vector<Configuration> configurations = session.options.configurations();
    const std::size_t first = out.size();
    const auto fail_all = [&](Status status, const std::string& error, std::size_t from_shape) {
        for (std::size_t s = from_shape; s < shapes.size(); ++s) {
            for (const Configuration& configuration : configurations) {
                out.push_back(unmeasured(shapes[s], configuration, status, error));
                progress(session, out.back());
            }
        }
    };
    if (!session.broken.empty()) {
        fail_all(Status::Failed, "not run: the CUDA context failed earlier: " + session.broken, 0);
        return;
    }
    std::size_t next_shape = 0;
    try {
        const Node first_node = make_node(shapes.front(), session.options.path);
        const std::uint64_t seed = node_seed(session.seed, shapes.front());
        const HostWeights host_weights = make_weights(first_node, seed);
        const Rotation rotation = rotation_for(runtime, session.options.method,
                                               DeviceWeights::bytes_per_copy(first_node), shapes.front().decode());
        const DeviceWeights weights(runtime, first_node, host_weights, rotation.copies);
        for (; next_shape < shapes.size(); ++next_shape) {
            const BenchShape& shape = shapes[next_shape];
            const Node node = make_node(shape, session.options.path);
            const HostRows host_rows = make_rows(node, mix_seed(seed, std::to_string(shape.m)));
            const DeviceRows rows(runtime, node, host_rows);
            for (const Configuration& configuration : configurations) {
                if (!session.broken.empty()) {
                    out.push_back(unmeasured(shape, configuration, Status::Failed,
                                             "not run: the CUDA context failed earlier: " + session.broken));
                } else {
                    out.push_back(
                        measure_row(session, node, host_weights, host_rows, weights, rows, rotation, configuration));
                    if (out.back().status == Status::Failed) {
                        context_usable(runtime, session.broken);
                    }
                }
                progress(session, out.back());
            }
        }
    } catch (const std::exception& error) {
        Status status = Status::Failed;
        std::string message;
        // Unsupported here is make_node's (the paired node in f32), whatever the policy.
        record_error(status, message, error, session.options.path, KernelPolicy::Fastest);
        // Rows already measured stand; the rest of this node shares the failure.
        const std::size_t measured_rows = next_shape * configurations.size();
        out.resize(first + std::min(measured_rows, out.size() - first));
        fail_all(status, message, next_shape);
        if (status == Status::Failed) {
            context_usable(runtime, session.broken);
        }
    }

    if (session.options.read_floor && session.broken.empty()) {
        for (const BenchShape& shape : shapes) {
            const auto of_shape = [&](const Row& row) { return row.shape.m == shape.m && row.bytes > 0; };
            const auto measured = std::find_if(out.begin() + static_cast<std::ptrdiff_t>(first), out.end(), of_shape);
            if (!shape.decode() || measured == out.end()) {
                continue;
            }
            try {
                const Timing floor = time_read_floor(runtime, session.device, measured->bytes,
                                                     session.options.method);
                for (auto row = measured; row != out.end(); ++row) {
                    if (of_shape(*row)) {
                        row->read_floor = floor;
                    }
                }
                std::cerr << fmt::format("      read floor {}: {:.2f} us\n", where(shape), floor.us.median);
            } catch (const std::exception& error) {
                std::cerr << fmt::format("      read floor {}: failed: {}\n", where(shape), error.what());
                context_usable(runtime, session.broken);
            }
        }
    }
    if (!session.options.dense || !session.broken.empty()) {
        return;
    }
    bool any_measured = false;
    for (std::size_t i = first; i < out.size(); ++i) {
        any_measured = any_measured || out[i].status == Status::Ok;
    }
    if (!any_measured) {
        return;
    }
    std::vector<std::size_t> ms;
    for (const BenchShape& shape : shapes) {
        ms.push_back(shape.m);
    }
    const BenchShape& node = shapes.front();
    const std::vector<Dense> dense =
        time_dense(runtime, session.options.path.activation, node.k, node.weight_columns(), ms, node.regime,
                   session.options.method, node_seed(session.seed, node) ^ 0xD15EA5Eull);
    for (std::size_t i = first; i < out.size(); ++i) {
        const auto at = static_cast<std::size_t>(std::find(ms.begin(), ms.end(), out[i].shape.m) - ms.begin());
        out[i].dense = dense[at];
    }
    for (std::size_t s = 0; s < dense.size(); ++s) {
        std::cerr << fmt::format("      dense {} {}: {}\n", short_name(dense[s].dtype), where(shapes[s]),
                                 dense[s].timing ? fmt::format("{:.2f} us", dense[s].timing->us.median)
                                                 : "failed: " + dense[s].error);
    }
    if (std::any_of(dense.begin(), dense.end(), [](const Dense& d) { return !d.error.empty(); })) {
        context_usable(runtime, session.broken);
    }
}

std::uint64_t fresh_seed()
{
    std::random_device device;
    return (static_cast<std::uint64_t>(device()) << 32) ^ device() ^
           static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
}

// Used when the driver reports no L2 size: larger than any current GPU's, so
// the rotation still leaves L2.
constexpr std::size_t kAssumedL2Bytes = std::size_t{128} << 20;

Report start_report(CudaRuntime& runtime, const BenchOptions& options, Mode mode)
{
    Report report;
    report.mode = mode;
    report.version = version();
    report.device = read_device_facts(runtime);
    report.path = options.path;
    report.policies = options.policies;
    report.override_sets = options.override_sets;
    report.seed = options.seed ? *options.seed : fresh_seed();
    return report;
}

Method method_for(const Report& report, const BenchOptions& options)
{
    Method method = options.method;
    method.l2_bytes = report.device.l2_bytes;
    if (method.l2_bytes == 0) {
        std::cerr << "nbits-bench: the driver reports no L2 size; rotating weights as if it were 128 MiB\n";
        method.l2_bytes = kAssumedL2Bytes;
    }
    return method;
}

}  // namespace

// ------------------------------------------------------------ timing mode ---

Report run_timing(const std::shared_ptr<CudaRuntime>& runtime, const BenchOptions& options)
{
    const auto start = std::chrono::steady_clock::now();
    Report report = start_report(*runtime, options, Mode::Timing);
    BenchOptions effective = options;
    effective.method = method_for(report, options);
    report.method = effective.method.describe();
    const std::vector<BenchShape> shapes = options.shapes();

    std::size_t prefill_rows = 0;
    for (const BenchShape& shape : shapes) {
        prefill_rows += shape.decode() ? 0 : 1;
    }
    const std::size_t configurations = options.configurations().size();
    std::cerr << fmt::format("nbits-bench: {} (sm_{}{}, {} SMs, L2 {} MiB), {} rows x {} configurations, {}, seed {}\n",
                             report.device.name, report.device.compute_major, report.device.compute_minor,
                             report.device.multiprocessors, report.device.l2_bytes >> 20, shapes.size(),
                             configurations, options.path.describe(), report.seed);
    for (const OverrideSet& set : options.override_sets) {
        std::cerr << "nbits-bench: " << set.describe() << "\n";
    }
    if (prefill_rows > 0) {
        std::cerr << fmt::format(
            "nbits-bench: budget: each of {} prefill rows (x {} configurations{}) times at most {:g} ms of device time "
            "(at least {} runs, at most {}), after up to {} warm-ups and one sizing run (--row-budget-ms)\n",
            prefill_rows, configurations, options.dense ? ", + dense" : "", effective.method.row_budget_ms,
            effective.method.min_prefill_repeats, effective.method.prefill_repeats, effective.method.warmups);
    }
    try {
        report.ceiling = measure_read_ceiling(*runtime, report.device, effective.method);
        std::cerr << fmt::format("nbits-bench: read ceiling {:.0f} GB/s\n", report.ceiling->gbps);
    } catch (const std::exception& error) {
        // Without it only %read is missing; every other column stands.
        std::cerr << "nbits-bench: the read-ceiling measurement failed, %read will be empty: " << error.what() << "\n";
    }

    Session session{runtime, effective, report.device, report.seed, "", 0, shapes.size() * configurations};
    for (std::size_t begin = 0; begin < shapes.size();) {
        std::size_t end = begin + 1;
        while (end < shapes.size() && shapes[end].same_node(shapes[begin]) &&
               shapes[end].regime == shapes[begin].regime) {
            ++end;
        }
        measure_node(session, std::vector<BenchShape>(shapes.begin() + static_cast<std::ptrdiff_t>(begin),
                                                      shapes.begin() + static_cast<std::ptrdiff_t>(end)),
                     report.rows);
        begin = end;
    }
    report.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::cerr << fmt::format("nbits-bench: {} rows in {:.1f} s\n", report.rows.size(), report.wall_seconds);
    return report;
}

// --------------------------------------------------------- host overhead ---

namespace {

// One plan step launched without the operator: its function, geometry and
// arguments resolved once against the bench's buffers.
struct BareStep {
    CUfunction function = nullptr;
    LaunchConfig config;
    KernelArgs args;
    void** params = nullptr;
    std::optional<blas::GemmParams> gemm;
    CUdeviceptr gemm_workspace = 0;
    std::size_t gemm_workspace_bytes = 0;
    std::string what;
};

struct Bindings {
    const std::vector<Tensor>& inputs;
    const std::vector<Tensor>& outputs;
    CUdeviceptr scratch = 0;
    CUdeviceptr accuracy4_workspace = 0;
    const ops::LaunchPlan& plan;
};

CUdeviceptr resolve(const ops::BufferRef& ref, const Bindings& b)
{
    using Kind = ops::BufferRef::Kind;
    const auto slot = static_cast<std::size_t>(ref.index);
    switch (ref.kind) {
    case Kind::Null: return 0;
    case Kind::Input: return b.inputs.at(slot).data + ref.offset;
    case Kind::Output: return b.outputs.at(slot).data + ref.offset;
    case Kind::Scratch: return b.scratch + b.plan.scratch_offset(ref.index) + ref.offset;
    case Kind::Workspace: return b.accuracy4_workspace + ref.offset;
    }
    return 0;
}

std::vector<BareStep> resolve_steps(CudaRuntime& runtime, const Bindings& bindings)
{
    CudaRuntime::Internals& internals = runtime.internals();
    const CudaRuntime::Internals::ScopedContext scope(internals);  // tensor maps are encoded in it
    std::vector<BareStep> steps;
    for (const ops::PlanStep& planned : bindings.plan.steps) {
        BareStep bare;
        if (const auto* step = std::get_if<ops::KernelStep>(&planned)) {
            bare.function = internals.step_function(*step);
            bare.config = step->config;
            bare.what = step->what;
            bare.args = kernel_args(*step, [&](const ops::BufferRef& ref) { return resolve(ref, bindings); });
        } else {
            const auto& gemm = std::get<ops::GemmStep>(planned);
            bare.gemm = blas::gemm_params(gemm, [&](const ops::BufferRef& ref) { return resolve(ref, bindings); });
            bare.gemm_workspace = resolve(gemm.workspace, bindings);
            bare.gemm_workspace_bytes = gemm.workspace_bytes;
            bare.what = "cuBLASLt GEMM";
        }
        steps.push_back(std::move(bare));
    }
    // The argument arrays have their final addresses only now.
    for (BareStep& step : steps) {
        step.params = step.args.pointers();
    }
    return steps;
}

void launch_bare(CudaRuntime& runtime, const std::vector<BareStep>& steps, CUstream stream)
{
    const cuda::Driver& driver = cuda::driver();
    for (const BareStep& step : steps) {
        if (step.gemm) {
            blas::gemm(runtime, *step.gemm, step.gemm_workspace, step.gemm_workspace_bytes, stream);
            continue;
        }
        const LaunchConfig& c = step.config;
        const CUresult result = driver.launch_kernel(step.function, c.grid.x, c.grid.y, c.grid.z, c.block.x, c.block.y,
                                                     c.block.z, c.dynamic_shared_bytes, stream, step.params, nullptr);
        if (result != CUDA_SUCCESS) {
            cuda::check(result, "bare launch of " + step.what);
        }
    }
}

OverheadRow measure_overhead(Session& session, const BenchShape& shape, const Configuration& configuration)
{
    CudaRuntime& runtime = *session.runtime;
    const Method& method = session.options.method;
    OverheadRow row;
    row.shape = shape;
    row.policy = configuration.policy;
    row.overrides = configuration.overrides;
    try {
        const Node node = make_node(shape, session.options.path);
        const std::uint64_t seed = node_seed(session.seed, shape);
        const HostWeights host_weights = make_weights(node, seed);
        const HostRows host_rows = make_rows(node, mix_seed(seed, std::to_string(shape.m)));
        const DeviceWeights weights(runtime, node, host_weights, 1);
        const DeviceRows rows(runtime, node, host_rows);
        const std::vector<Tensor> inputs = bind_inputs(node, weights, rows, 0);
        const std::vector<Tensor> outputs = bind_outputs(node, rows);

        ops::MatMulNBits op(session.runtime, node.attributes,
                            MatMulNBitsOptions{configuration.policy, session.options.plan_overrides(configuration)});
        const std::size_t scratch = op.workspace_bytes(node.input_descs(), {node.output});
        const DeviceBuffer workspace = scratch > 0 ? DeviceBuffer(runtime, scratch) : DeviceBuffer();
        const RunOptions run_options{runtime.stream(), workspace.get(), scratch};
        const std::size_t accuracy4_bytes = op.config().accuracy4_workspace_bytes();
        const DeviceBuffer accuracy4 = accuracy4_bytes > 0 ? DeviceBuffer(runtime, accuracy4_bytes) : DeviceBuffer();

        poison(runtime, node, rows);
        const std::shared_ptr<const ops::LaunchPlan> plan = op.run(inputs, outputs, run_options);
        runtime.synchronize();
        row.variant = plan->variant;
        row.steps = step_names(*plan);
        row.check = checked(session, node, host_weights, host_rows, rows, row.status, row.error);
        if (!row.check->passed) {
            return row;
        }
        const std::vector<std::uint8_t> expected = download(runtime, node, rows);

        // Bare launches must write what run() wrote, or they time something else.
        const std::vector<BareStep> bare =
            resolve_steps(runtime, Bindings{inputs, outputs, workspace.get(), accuracy4.get(), *plan});
        const CUstream stream = runtime.stream();
        ScopedContext scope(runtime);
        poison(runtime, node, rows);
        launch_bare(runtime, bare, stream);
        runtime.synchronize();
        const std::vector<std::uint8_t> written = download(runtime, node, rows);
        if (written != expected) {
            // A reduction whose order varies (atomics) may differ in the last
            // bits from run to run; wrongly bound arguments fail the oracle.
            const Check bare_check = check_output(node, host_weights, host_rows, written);
            if (!bare_check.passed) {
                row.status = Status::Failed;
                row.error = "the bare launches of the plan's steps wrote other bytes than run() and fail the oracle "
                            "check (" + bare_check.summary() + "): their arguments are bound wrongly";
                return row;
            }
            row.notes.push_back("the bare launches wrote other bytes than run(), within the oracle bound: the plan's "
                                "reduction order varies between runs");
        }
        if (std::any_of(bare.begin(), bare.end(), [](const BareStep& step) { return step.gemm.has_value(); })) {
            row.notes.push_back("the plan has a cuBLASLt step: the bare sequence calls cuBLASLt for it");
        }

        const auto calls = static_cast<std::size_t>(method.overhead_batch);
        const auto run_batch = [&] {
            for (std::size_t i = 0; i < calls; ++i) {
                op.run(inputs, outputs, run_options);
            }
        };
        const auto bare_batch = [&] {
            for (std::size_t i = 0; i < calls; ++i) {
                launch_bare(runtime, bare, stream);
            }
        };
        // Host microseconds per call of one batch; the device drains between batches.
        const auto time_batch = [&](const std::function<void()>& batch) {
            const auto begin = std::chrono::steady_clock::now();
            batch();
            const auto end = std::chrono::steady_clock::now();
            runtime.synchronize();
            return std::chrono::duration<double, std::micro>(end - begin).count() / static_cast<double>(calls);
        };
        time_batch(run_batch);
        time_batch(bare_batch);
        std::vector<double> run_samples;
        std::vector<double> bare_samples;
        // Interleaved, so that clock or load drift touches both alike.
        for (int b = 0; b < method.overhead_batches; ++b) {
            run_samples.push_back(time_batch(run_batch));
            bare_samples.push_back(time_batch(bare_batch));
        }
        row.calls_per_batch = calls;
        row.batches = static_cast<std::size_t>(method.overhead_batches);
        row.run_us = summarize(run_samples);
        row.bare_us = summarize(bare_samples);
        row.status = Status::Ok;
    } catch (const std::exception& error) {
        record_error(row.status, row.error, error, session.options.path, configuration.policy);
    }
    return row;
}

}  // namespace

Report run_host_overhead(const std::shared_ptr<CudaRuntime>& runtime, const BenchOptions& options)
{
    const auto start = std::chrono::steady_clock::now();
    Report report = start_report(*runtime, options, Mode::HostOverhead);
    report.method = fmt::format(
        "host time of eager run() calls on the runtime's stream, {} calls per batch between two synchronizations "
        "(host clock around the calls only), median of {} batches after one warm-up batch; beside it bare "
        "cuLaunchKernel of the plan's steps with the same arguments and geometry, batched and interleaved alike",
        options.method.overhead_batch, options.method.overhead_batches);
    const std::vector<BenchShape> shapes = options.shapes();
    const std::vector<Configuration> configurations = options.configurations();
    std::cerr << fmt::format("nbits-bench: host overhead on {}, {} nodes x {} configurations, {}\n",
                             report.device.name, shapes.size(), configurations.size(), options.path.describe());
    Session session{runtime, options, report.device, report.seed, "", 0, shapes.size() * configurations.size()};
    for (const BenchShape& shape : shapes) {
        for (const Configuration& configuration : configurations) {
            OverheadRow row;
            if (!session.broken.empty()) {
                row.shape = shape;
                row.policy = configuration.policy;
                row.overrides = configuration.overrides;
                row.error = "not run: the CUDA context failed earlier: " + session.broken;
            } else {
                row = measure_overhead(session, shape, configuration);
                if (row.status == Status::Failed) {
                    context_usable(*runtime, session.broken);
                }
            }
            ++session.done;
            std::cerr << fmt::format("[{}/{}] {} {}: {}\n", session.done, session.total, where(shape),
                                     configuration.name(),
                                     row.status == Status::Ok
                                         ? fmt::format("run {:.2f} us, bare {:.2f} us, overhead {:.2f} us per call",
                                                       row.run_us.median, row.bare_us.median, row.overhead_us())
                                         : fmt::format("{}: {}", to_string(row.status), row.error));
            report.overhead.push_back(std::move(row));
        }
    }
    report.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return report;
}

// ------------------------------------------------------------------ plans ---

namespace {

struct PlanTarget {
    Capabilities capabilities;
    std::string where;
};

PlanTarget plan_target(const BenchOptions& options)
{
    std::string why;
    if (cuda::driver_available(&why)) {
        try {
            RuntimeOptions runtime_options;
            runtime_options.device = options.device;
            const CudaRuntime runtime(runtime_options);
            return {runtime.capabilities(), "this GPU"};
        } catch (const Error& error) {
            why = error.what();
        }
    }
    std::cerr << "nbits-bench: no usable CUDA GPU, planning for an H200: " << why << "\n";
    return {Capabilities::h200(), "an assumed H200"};
}

}  // namespace

std::string render_plans(const BenchOptions& options, int& failed)
{
    const PlanTarget target = plan_target(options);
    ops::PlanContext context;
    context.capabilities = target.capabilities;
    const Capabilities& c = target.capabilities;
    const std::string device = fmt::format("{} ({}, sm_{}, {} SMs)", c.name, target.where, c.sm(),
                                           c.multiprocessor_count);

    const bool json = options.format == OutputFormat::Json;
    JsonWriter writer;
    std::string text = fmt::format("nbits-bench --plan on {}, path {}\n", device, options.path.describe());
    for (const OverrideSet& set : options.override_sets) {
        text += set.describe() + "\n";
    }
    text += "\n";
    if (json) {
        writer.begin_object().field("tool", "nbits-bench").field("version", version()).field("device", device);
        writer.field("path", options.path.describe()).key("plans").begin_array();
    }
    failed = 0;
    for (const BenchShape& shape : options.shapes()) {
        for (const Configuration& configuration : options.configurations()) {
            const KernelPolicy policy = configuration.policy;
            std::optional<ops::LaunchPlan> plan;
            Status status = Status::Ok;
            std::string error;
            try {
                const Node node = make_node(shape, options.path);
                context.policy = policy;
                context.overrides =
                    options.plan_overrides(configuration).value_or(ops::PlanOverrides::from_environment());
                plan = ops::plan_matmul_nbits(ops::MatMulNBitsConfig::from_attributes(node.attributes),
                                              node.input_descs(), {node.output}, context);
            } catch (const std::exception& caught) {
                record_error(status, error, caught, options.path, policy);
                failed += status == Status::Failed ? 1 : 0;
            }
            if (json) {
                writer.begin_object()
                    .field("label", shape.label())
                    .field("model", shape.model)
                    .field("projection", to_string(shape.projection))
                    .field("m", shape.m)
                    .field("k", shape.k)
                    .field("n", shape.n)
                    .field("regime", to_string(shape.regime))
                    .field("policy", to_string(policy));
                if (!configuration.overrides.empty()) {
                    writer.field("overrides", configuration.overrides);
                }
                writer.field("status", to_string(status));
                if (plan) {
                    std::string rendered = plan->to_json();
                    while (!rendered.empty() && rendered.back() == '\n') {
                        rendered.pop_back();
                    }
                    writer.key("plan").rendered(rendered);
                } else {
                    writer.field("error", error);
                }
                writer.end_object();
            } else {
                text += fmt::format("== {} ({}), policy {}\n", where(shape), to_string(shape.regime),
                                    configuration.name());
                text += plan ? plan->describe() : fmt::format("{}: {}\n", to_string(status), error);
                text += "\n";
            }
        }
    }
    if (json) {
        writer.end_array().end_object();
        return writer.str();
    }
    return text;
}

}  // namespace nbits::bench

// The MatMulNBits operator: node attributes, environment overrides, the plan
// cache and run().

#include "nbits/matmul_nbits.hpp"

#include "cuda/driver.hpp"
#include "jit/environment.hpp"
#include "ops/execute.hpp"
#include "ops/plan_cache.hpp"
#include "ops/plan_internal.hpp"
#include "ops/testing.hpp"
#include "runtime/internals.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <limits>

namespace nbits {

NodeAttributes& NodeAttributes::set(const std::string& name, std::int64_t value)
{
    values_[name] = value;
    return *this;
}

NodeAttributes& NodeAttributes::set(const std::string& name, float value)
{
    values_[name] = value;
    return *this;
}

NodeAttributes& NodeAttributes::set(const std::string& name, std::string value)
{
    values_[name] = std::move(value);
    return *this;
}

const NodeAttributes::Value* NodeAttributes::find(const std::string& name) const
{
    const auto found = values_.find(name);
    return found == values_.end() ? nullptr : &found->second;
}

std::optional<std::int64_t> NodeAttributes::as_int(const std::string& name) const
{
    const Value* value = find(name);
    if (value == nullptr || !std::holds_alternative<std::int64_t>(*value)) {
        return std::nullopt;
    }
    return std::get<std::int64_t>(*value);
}

std::optional<float> NodeAttributes::as_float(const std::string& name) const
{
    const Value* value = find(name);
    if (value == nullptr || !std::holds_alternative<float>(*value)) {
        return std::nullopt;
    }
    return std::get<float>(*value);
}

namespace ops {
namespace {

constexpr std::size_t kGroupIndexSlot = 4;
constexpr std::size_t kMaxDimension = 0x7fffffff;

std::optional<std::int64_t> optional_int_attr(const NodeAttributes& attributes, const std::string& name)
{
    if (!attributes.has(name)) {
        return std::nullopt;
    }
    const std::optional<std::int64_t> value = attributes.as_int(name);
    if (!value) {
        detail::fail(fmt::format("attribute '{}' must be an integer", name));
    }
    return value;
}

std::size_t required_positive_attr(const NodeAttributes& attributes, const std::string& name)
{
    const std::optional<std::int64_t> value = optional_int_attr(attributes, name);
    if (!value) {
        detail::fail(fmt::format("missing required integer attribute '{}'", name));
    }
    if (*value <= 0) {
        detail::fail(fmt::format("attribute '{}' must be positive, got {}", name, *value));
    }
    return static_cast<std::size_t>(*value);
}

bool is_power_of_two(std::size_t value) { return value != 0 && (value & (value - 1)) == 0; }

// The optimizer's markers count only as the integer 1; anything else is "not marked".
bool marker_set(const NodeAttributes& attributes, const char* name) { return attributes.as_int(name) == 1; }

[[noreturn]] void fail_bits(std::int64_t bits)
{
    detail::fail_unsupported(fmt::format(
        "MatMulNBits CUDA supports bits in {{4, 8}}, got bits={}. Why: the native kernels implement packed int4 "
        "and int8 layouts. How to fix: export bits=4 or bits=8, or select another execution provider",
        bits));
}

[[noreturn]] void fail_block_size(std::size_t block_size)
{
    detail::fail(fmt::format("block_size must be a power of two and at least 16, got {}", block_size));
}

// An unsigned decimal with an optional '+' ("+4" and "04" count), within 32 bits.
std::optional<std::uint32_t> parse_u32(const std::string& text)
{
    std::size_t position = text.size() > 1 && text[0] == '+' ? 1 : 0;
    if (position == text.size()) {
        return std::nullopt;
    }
    std::uint64_t value = 0;
    for (; position < text.size(); ++position) {
        const char c = text[position];
        if (c < '0' || c > '9') {
            return std::nullopt;
        }
        value = value * 10 + static_cast<std::uint64_t>(c - '0');
        if (value > std::numeric_limits<std::uint32_t>::max()) {
            return std::nullopt;
        }
    }
    return static_cast<std::uint32_t>(value);
}

std::vector<TensorDesc> descriptors(const std::vector<Tensor>& tensors)
{
    return std::vector<TensorDesc>(tensors.begin(), tensors.end());
}

// Copies g_idx to the host once `stream`'s earlier work is done.
std::vector<std::int32_t> read_group_indices(CudaRuntime& runtime, CUdeviceptr data, const TensorDesc& g_idx,
                                             CUstream stream)
{
    std::vector<std::int32_t> groups(g_idx.numel());
    if (groups.empty()) {
        return groups;
    }
    if (data == 0) {
        detail::fail("g_idx (input 4) has no device address, so its group indices cannot be checked. How "
                     "to fix: pass the tensor's device pointer in Tensor::data");
    }
    const cuda::Driver& d = cuda::driver();
    CudaRuntime::Internals::ScopedContext scope(runtime);
    cuda::check(d.stream_synchronize(stream), "waiting for the stream before reading g_idx");
    cuda::check(d.memcpy_dtoh(groups.data(), data, groups.size() * sizeof(std::int32_t)),
                "copying g_idx to the host for its range check");
    return groups;
}

}  // namespace

// Checked in the original's order (K, N, bits, weight_prepacked, block_size)
// so that a node with several problems reports the same one first.
MatMulNBitsConfig MatMulNBitsConfig::from_attributes(const NodeAttributes& attributes)
{
    MatMulNBitsConfig config;
    config.k = required_positive_attr(attributes, "K");
    config.n = required_positive_attr(attributes, "N");
    const std::int64_t bits = optional_int_attr(attributes, "bits").value_or(4);
    if (bits != 4 && bits != 8) {
        fail_bits(bits);
    }
    config.bits = static_cast<std::size_t>(bits);
    const std::int64_t weight_prepacked = optional_int_attr(attributes, "weight_prepacked").value_or(0);
    if (weight_prepacked != 0) {
        detail::fail_unsupported(fmt::format(
            "weight_prepacked={} is unsupported: CUDA only supports the standard (non-prepacked) layout",
            weight_prepacked));
    }
    config.block_size = required_positive_attr(attributes, "block_size");
    if (config.block_size < 16 || !is_power_of_two(config.block_size)) {
        fail_block_size(config.block_size);
    }
    // The original reads accuracy_level leniently: a non-integer value means 0.
    config.accuracy_level = attributes.as_int("accuracy_level").value_or(0);
    config.fold_bias_post_round = marker_set(attributes, kFoldedBiasAttr);
    config.gate_up_swiglu = marker_set(attributes, kGateUpSwigluAttr);
    config.rmsnorm_prologue = marker_set(attributes, kRmsNormPrologueAttr);
    config.rmsnorm_epsilon = attributes.as_float(kRmsNormEpsilonAttr).value_or(1e-5f);
    config.validate();
    return config;
}

void MatMulNBitsConfig::validate() const
{
    for (const auto& [name, value] : {std::pair{"K", k}, std::pair{"N", n}}) {
        if (value == 0 || value > kMaxDimension) {
            detail::fail(fmt::format("attribute '{}' must be in 1..{}, got {}. Why: the kernels index K and N with "
                                     "32-bit integers",
                                     name, kMaxDimension, value));
        }
    }
    if (bits != 4 && bits != 8) {
        fail_bits(static_cast<std::int64_t>(bits));
    }
    if (block_size < 16 || block_size > (std::size_t{1} << 30) || !is_power_of_two(block_size)) {
        fail_block_size(block_size);
    }
}

std::size_t MatMulNBitsConfig::accuracy4_workspace_bytes() const
{
    if (bits != 4 || accuracy_level != 4) {
        return 0;
    }
    return padded_k() + k_blocks() * sizeof(float);
}

namespace {

// The overrides from `variable(name)` (the text of an environment variable,
// nullopt when unset), NBITS_* names before their aliases.
PlanOverrides parse_overrides(const jit::EnvLookup& variable)
{
    auto first = [&](const char* name, const char* alias) {
        std::optional<std::string> value = variable(name);
        return value ? value : variable(alias);
    };
    PlanOverrides overrides;
    // The original matches the exact strings "8", "4" and "2" (no sign, no padding).
    const std::optional<std::string> down_columns = first(kDownColumnsEnv, kDownColumnsAliasEnv);
    if (down_columns && (*down_columns == "8" || *down_columns == "4" || *down_columns == "2")) {
        overrides.down_columns = std::stoi(*down_columns);
    }
    // The others: an unsigned decimal (parse_u32) that the override accepts.
    auto accepted = [](const std::optional<std::string>& text, auto accepts) -> std::optional<int> {
        const std::optional<std::uint32_t> value = text ? parse_u32(*text) : std::nullopt;
        return value && accepts(*value) ? std::optional<int>(static_cast<int>(*value)) : std::nullopt;
    };
    overrides.accuracy4_warps = accepted(first(kAccuracy4WarpsEnv, kAccuracy4WarpsAliasEnv), [](std::uint32_t warps) {
        return warps == 1 || warps == 2 || warps == 4 || warps == 8;
    });
    overrides.prefill_split_k =
        accepted(variable(kPrefillSplitKEnv), [](std::uint32_t split) { return split >= 1 && split <= 8; });
    overrides.prefill_wgmma_tile_n =
        accepted(variable(kPrefillWgmmaTileNEnv), [](std::uint32_t rows) { return rows == 128 || rows == 256; });
    overrides.prefill_wgmma_min_m =
        accepted(variable(kPrefillWgmmaMinMEnv), [](std::uint32_t rows) { return rows >= 17 && rows <= 65; });
    overrides.prefill_wgmma_tile_m =
        accepted(variable(kPrefillWgmmaTileMEnv),
                 [](std::uint32_t tokens) { return tokens == 64 || tokens == 128 || tokens == 256; });
    overrides.prefill_producer_warps = accepted(variable(kPrefillProducerWarpsEnv),
                                                [](std::uint32_t warps) { return warps <= 2 || warps == 4; });
    overrides.prefill_tma = accepted(variable(kPrefillTmaEnv), [](std::uint32_t on) { return on <= 1; });
    overrides.prefill_tail_split = accepted(variable(kPrefillTailSplitEnv), [](std::uint32_t on) { return on <= 1; });
    overrides.prefill_wide_split = accepted(variable(kPrefillWideSplitEnv), [](std::uint32_t on) { return on <= 1; });
    overrides.prefill_stream_k = accepted(variable(kPrefillStreamKEnv), [](std::uint32_t on) { return on <= 1; });
    overrides.prefill_programmatic =
        accepted(variable(kPrefillProgrammaticEnv), [](std::uint32_t on) { return on <= 1; });
    overrides.prefill_register_handback =
        accepted(variable(kPrefillRegisterHandbackEnv), [](std::uint32_t on) { return on <= 1; });
    overrides.decode_programmatic = accepted(variable(kDecodeProgrammaticEnv), [](std::uint32_t on) { return on <= 1; });
    overrides.decode_stages =
        accepted(variable(kDecodeStagesEnv), [](std::uint32_t stages) { return stages >= 2 && stages <= 4; });
    overrides.decode_tiles =
        accepted(variable(kDecodeTilesEnv), [](std::uint32_t tiles) { return tiles == 1 || tiles == 2; });
    overrides.decode_stage_acts = accepted(variable(kDecodeStageActsEnv), [](std::uint32_t on) { return on <= 1; });
    overrides.decode_col_warps = accepted(variable(kDecodeColWarpsEnv),
                                          [](std::uint32_t warps) { return warps == 1 || warps == 2 || warps == 4; });
    overrides.prefill_chunk_columns = accepted(variable(kPrefillChunkColumnsEnv), [](std::uint32_t columns) {
        return columns >= 64 && columns <= (1u << 20);
    });
    overrides.decode_cluster_k = accepted(variable(kDecodeClusterKEnv),
                                          [](std::uint32_t ctas) { return ctas == 1 || ctas == 2 || ctas == 4; });
    overrides.decode_chunks =
        accepted(variable(kDecodeChunksEnv), [](std::uint32_t chunks) { return chunks == 1 || chunks == 2; });
    overrides.decode_stage_meta = accepted(variable(kDecodeStageMetaEnv), [](std::uint32_t on) { return on <= 1; });
    overrides.decode_prefetch = accepted(variable(kDecodePrefetchEnv), [](std::uint32_t on) { return on <= 1; });
    overrides.decode_early_acts = accepted(variable(kDecodeEarlyActsEnv), [](std::uint32_t on) { return on <= 1; });
    overrides.decode_offset_codes =
        accepted(variable(kDecodeOffsetCodesEnv), [](std::uint32_t mode) { return mode <= 2; });
    return overrides;
}

}  // namespace

PlanOverrides PlanOverrides::parse(const std::map<std::string, std::string>& variables)
{
    return parse_overrides([&variables](const char* name) -> std::optional<std::string> {
        const auto found = variables.find(name);
        return found != variables.end() ? std::optional<std::string>(found->second) : std::nullopt;
    });
}

PlanOverrides PlanOverrides::from_environment()
{
    return parse_overrides(jit::process_environment());
}

namespace {

constexpr std::optional<int> PlanOverrides::*kOverrideFields[] = {
    &PlanOverrides::down_columns,          &PlanOverrides::accuracy4_warps,      &PlanOverrides::prefill_split_k,
    &PlanOverrides::prefill_wgmma_tile_n,  &PlanOverrides::prefill_wgmma_min_m,  &PlanOverrides::prefill_wgmma_tile_m,
    &PlanOverrides::prefill_producer_warps, &PlanOverrides::prefill_tma,         &PlanOverrides::prefill_tail_split,
    &PlanOverrides::prefill_wide_split,    &PlanOverrides::prefill_stream_k,     &PlanOverrides::prefill_chunk_columns,
    &PlanOverrides::prefill_programmatic,  &PlanOverrides::decode_programmatic,  &PlanOverrides::decode_stages,
    &PlanOverrides::decode_tiles,          &PlanOverrides::decode_stage_acts,    &PlanOverrides::decode_col_warps,
    &PlanOverrides::decode_cluster_k,      &PlanOverrides::decode_chunks,        &PlanOverrides::decode_stage_meta,
    &PlanOverrides::decode_prefetch,       &PlanOverrides::decode_early_acts,    &PlanOverrides::decode_offset_codes,
    &PlanOverrides::prefill_register_handback,
};
// A field added to PlanOverrides and not to the list would be neither merged nor counted.
static_assert(sizeof(PlanOverrides) == std::size(kOverrideFields) * sizeof(std::optional<int>),
              "kOverrideFields lists every field of PlanOverrides");

}  // namespace

bool PlanOverrides::any() const
{
    return std::any_of(std::begin(kOverrideFields), std::end(kOverrideFields),
                       [this](auto field) { return (this->*field).has_value(); });
}

void PlanOverrides::merge(const PlanOverrides& over)
{
    for (const auto field : kOverrideFields) {
        if (over.*field) {
            this->*field = over.*field;
        }
    }
}

MatMulNBits::MatMulNBits(std::shared_ptr<CudaRuntime> runtime, const NodeAttributes& attributes,
                         const MatMulNBitsOptions& options)
    : runtime_(std::move(runtime)), options_(options), plans_(std::make_unique<detail::PlanCache>())
{
    if (!runtime_) {
        throw Error(ErrorKind::InvalidArgument,
                    detail::prefixed("the operator needs a CudaRuntime, got none. How to fix: create one "
                                     "CudaRuntime per device and pass it to every operator on that device"));
    }
    config_ = MatMulNBitsConfig::from_attributes(attributes);
    overrides_ = options.overrides ? *options.overrides : PlanOverrides::from_environment();
    if (config_.accuracy4_workspace_bytes() != 0) {
        accuracy4_workspace_ = DeviceBuffer(*runtime_, config_.accuracy4_workspace_bytes());
    }
}

MatMulNBits::~MatMulNBits() = default;

PlanContext MatMulNBits::context(const std::vector<Tensor>* tensors, CUstream stream) const
{
    PlanContext context;
    context.capabilities = runtime_->capabilities();
    context.overrides = overrides_;
    context.policy = options_.policy;
    if (tensors != nullptr && tensors->size() > kGroupIndexSlot) {
        CudaRuntime* runtime = runtime_.get();
        const CUdeviceptr data = (*tensors)[kGroupIndexSlot].data;
        context.read_g_idx = [runtime, data, stream](const TensorDesc& g_idx) {
            return read_group_indices(*runtime, data, g_idx, stream);
        };
    }
    return context;
}

LaunchPlan MatMulNBits::plan(const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs) const
{
    return plan_matmul_nbits(config_, inputs, outputs, context(nullptr, nullptr));
}

LaunchPlan MatMulNBits::plan_tensors(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs) const
{
    return plan_matmul_nbits(config_, descriptors(inputs), descriptors(outputs),
                             context(&inputs, runtime_->stream()));
}

std::size_t MatMulNBits::workspace_bytes(const std::vector<TensorDesc>& inputs,
                                         const std::vector<TensorDesc>& outputs) const
{
    PlanContext planning = context(nullptr, nullptr);
    // The range of g_idx does not change the scratch; only its presence does.
    planning.read_g_idx = [](const TensorDesc&) { return std::vector<std::int32_t>{}; };
    return plan_matmul_nbits(config_, inputs, outputs, planning).workspace_bytes();
}

std::shared_ptr<const LaunchPlan> MatMulNBits::run(const std::vector<Tensor>& inputs,
                                                   const std::vector<Tensor>& outputs, const RunOptions& options)
{
    std::lock_guard<std::mutex> lock(mutex_);
    last_capture_safe_ = false;
    const CUstream stream = runtime_->internals().stream_for(options.stream);
    const detail::PlanCache::Entry* cached = plans_->find(inputs, outputs);
    if (cached == nullptr) {
        // Planning reads and range-checks g_idx itself.
        const std::vector<TensorDesc> input_descs = descriptors(inputs);
        const std::vector<TensorDesc> output_descs = descriptors(outputs);
        auto plan = std::make_shared<const LaunchPlan>(
            plan_matmul_nbits(config_, input_descs, output_descs, context(&inputs, stream)));
        detail::PlanFunctions functions = detail::load_plan_functions(*runtime_, *plan);
        cached = &plans_->insert(input_descs, output_descs, std::move(plan), std::move(functions));
    } else if (cached->plan->checks_group_indices) {
        const Tensor& g_idx = inputs[kGroupIndexSlot];
        detail::check_group_index_range(config_, read_group_indices(*runtime_, g_idx.data, g_idx, stream));
    }
    const LaunchPlan& plan = *cached->plan;
    if (trace_) {
        trace_(plan);
    }
    const bool gate_up_slots = config_.gate_up_swiglu && inputs[0].dtype != DataType::Float32;
    detail::execute_plan(*runtime_, plan, cached->functions,
                         {inputs, outputs, accuracy4_workspace_.get(), gate_up_slots}, options, stream);
    last_capture_safe_ = plan.capture_safe;
    return cached->plan;
}

CaptureSupport MatMulNBits::capture_support() const
{
    std::lock_guard<std::mutex> lock(mutex_);
    if (last_capture_safe_) {
        return {true, ""};
    }
    return {false, kCaptureUnsupportedReason};
}

void MatMulNBits::set_trace(TraceHook hook)
{
    std::lock_guard<std::mutex> lock(mutex_);
    trace_ = std::move(hook);
}

void MatMulNBits::clear_plan_cache()
{
    std::lock_guard<std::mutex> lock(mutex_);
    plans_->clear();
}

PlanCacheStats MatMulNBits::plan_cache_stats() const
{
    std::lock_guard<std::mutex> lock(mutex_);
    return plans_->stats();
}

namespace detail {

std::shared_ptr<const LaunchPlan> OperatorAccess::run_with_sources(MatMulNBits& op, const std::vector<Tensor>& inputs,
                                                                   const std::vector<Tensor>& outputs,
                                                                   const RunOptions& options,
                                                                   const KernelSourceOverride& sources)
{
    std::lock_guard<std::mutex> lock(op.mutex_);
    op.last_capture_safe_ = false;
    const CUstream stream = op.runtime_->internals().stream_for(options.stream);
    auto plan = std::make_shared<const LaunchPlan>(plan_matmul_nbits(
        op.config_, descriptors(inputs), descriptors(outputs), op.context(&inputs, stream)));
    const PlanFunctions functions = load_plan_functions(*op.runtime_, *plan, sources);
    if (op.trace_) {
        op.trace_(*plan);
    }
    execute_plan(*op.runtime_, *plan, functions,
                 {inputs, outputs, op.accuracy4_workspace_.get(),
                  op.config_.gate_up_swiglu && inputs[0].dtype != DataType::Float32},
                 options, stream);
    op.last_capture_safe_ = plan->capture_safe;
    return plan;
}

void OperatorAccess::set_allocation_budget(CudaRuntime& runtime, std::optional<std::uint64_t> allocations)
{
    runtime.internals().set_allocation_budget(allocations);
}

}  // namespace detail
}  // namespace ops
}  // namespace nbits

#include "ops/plan_internal.hpp"

#include "kernels.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <mutex>
#include <optional>

namespace nbits::ops {

struct LaunchPlan::LazyText {
    std::once_flag once;
    std::function<std::string()> build;
    std::string text;
};

const std::string& LaunchPlan::reason() const
{
    static const std::string none;
    if (!reason_) {
        return none;
    }
    std::call_once(reason_->once, [this] {
        if (reason_->build) {
            reason_->text = reason_->build();
        }
    });
    return reason_->text;
}

void LaunchPlan::set_reason(std::function<std::string()> build)
{
    reason_ = std::make_shared<LazyText>();
    reason_->build = std::move(build);
}

void LaunchPlan::set_reason(std::string text)
{
    set_reason([text = std::move(text)] { return text; });
}

namespace {

constexpr std::size_t kScratchAlignment = 256;

std::size_t align_up(std::size_t value) { return (value + kScratchAlignment - 1) / kScratchAlignment * kScratchAlignment; }

}  // namespace

std::size_t LaunchPlan::scratch_offset(int buffer) const
{
    std::size_t offset = 0;
    for (int i = 0; i < buffer && i < static_cast<int>(scratch_bytes.size()); ++i) {
        offset += align_up(scratch_bytes[static_cast<std::size_t>(i)]);
    }
    return offset;
}

std::size_t LaunchPlan::workspace_bytes() const { return scratch_offset(static_cast<int>(scratch_bytes.size())); }

namespace detail {
namespace {

std::uint64_t saturating_mul(std::uint64_t a, std::uint64_t b)
{
    if (a != 0 && b > std::numeric_limits<std::uint64_t>::max() / a) {
        return std::numeric_limits<std::uint64_t>::max();
    }
    return a * b;
}

std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b)
{
    return b > std::numeric_limits<std::uint64_t>::max() - a ? std::numeric_limits<std::uint64_t>::max() : a + b;
}

std::size_t wave_target(std::uint32_t multiprocessor_count, std::size_t ctas_per_sm)
{
    return static_cast<std::size_t>(std::max<std::uint32_t>(multiprocessor_count, 1)) * ctas_per_sm;
}

std::optional<DownColumns> down_columns_of(int columns)
{
    switch (columns) {
    case 8: return DownColumns{8, "matmul_nbits_gemv_f16_scales_f16_down"};
    case 4: return DownColumns{4, "matmul_nbits_gemv_f16_scales_f16_down_c4"};
    case 2: return DownColumns{2, "matmul_nbits_gemv_f16_scales_f16_down_c2"};
    default: return std::nullopt;
    }
}

constexpr const char* kInputNames[] = {"A", "B", "scales", "zero_points", "g_idx", "bias", "gamma"};
constexpr const char* kGateUpInputNames[] = {"A",         "W_gate", "scales_gate", "W_up",
                                             "scales_up", "gamma",  "zp_gate",     "zp_up"};

const TensorDesc* referenced_tensor(const BufferRef& ref, const PlanRequest& request)
{
    const auto slot = static_cast<std::size_t>(ref.index);
    if (ref.kind == BufferRef::Kind::Input && slot < request.inputs.size()) {
        return &request.inputs[slot];
    }
    if (ref.kind == BufferRef::Kind::Output && slot < request.outputs.size()) {
        return &request.outputs[slot];
    }
    return nullptr;
}

// Whether a declaration's `// align N when CONDITION` applies to `tensor`.
bool alignment_applies(const std::string& condition, const PlanRequest& request, const TensorDesc& tensor,
                       const KernelStep& step)
{
    if (condition.empty()) {
        return true;
    }
    if (condition == "int4") {
        return request.config.bits == 4;
    }
    if (condition == "int8") {
        return request.config.bits == 8;
    }
    if (condition == "fp16") {
        return element_size(tensor.dtype) == 2;
    }
    constexpr std::string_view block_prefix = "block_size=";
    if (condition.rfind(block_prefix, 0) == 0) {
        return std::to_string(request.config.block_size) == condition.substr(block_prefix.size());
    }
    // "K%8==0", "N%8==0", "B_ROW%16==0" (the bytes of one column of B): a divisibility the planner can check.
    const std::size_t percent = condition.find('%');
    const std::size_t equals = condition.find("==0");
    if (percent != std::string::npos && equals != std::string::npos && equals + 3 == condition.size()) {
        const std::string quantity = condition.substr(0, percent);
        const std::string divisor_text = condition.substr(percent + 1, equals - percent - 1);
        const std::size_t divisor =
            divisor_text.empty() || divisor_text.find_first_not_of("0123456789") != std::string::npos
                ? 0
                : std::stoul(divisor_text);
        const MatMulNBitsConfig& config = request.config;
        const std::optional<std::size_t> value = quantity == "K"       ? std::optional<std::size_t>(config.k)
                                                 : quantity == "N"     ? std::optional<std::size_t>(config.n)
                                                 : quantity == "B_ROW" ? std::optional<std::size_t>(
                                                                             config.k_blocks() * config.blob_size())
                                                                       : std::nullopt;
        if (value && divisor != 0) {
            return *value % divisor == 0;
        }
    }
    fail_internal(fmt::format("{} declares an alignment condition '{}' the planner does not know", step.entry,
                              condition));
}

const jit::KernelSource* source_declaring(std::string_view entry)
{
    for (const jit::KernelSource& source : kernels::all()) {
        if (source.entry(entry) != nullptr) {
            return &source;
        }
    }
    return nullptr;
}

const char* kind_name(int kind)
{
    switch (static_cast<jit::KernelParameter::Kind>(kind)) {
    case jit::KernelParameter::Kind::Pointer: return "a pointer";
    case jit::KernelParameter::Kind::Int32: return "an int";
    case jit::KernelParameter::Kind::Float32: return "a float";
    case jit::KernelParameter::Kind::TensorMap: return "a tensor map";
    case jit::KernelParameter::Kind::Unknown: break;
    }
    return "of a type the planner cannot pass";
}

}  // namespace

std::string tensor_label(const BufferRef& ref, bool gate_up)
{
    switch (ref.kind) {
    case BufferRef::Kind::Input: {
        const auto slot = static_cast<std::size_t>(ref.index);
        const std::size_t count = gate_up ? std::size(kGateUpInputNames) : std::size(kInputNames);
        const char* name = slot < count ? (gate_up ? kGateUpInputNames[slot] : kInputNames[slot]) : "input";
        return fmt::format("{} (input {})", name, ref.index);
    }
    case BufferRef::Kind::Output: return fmt::format("Y (output {})", ref.index);
    case BufferRef::Kind::Scratch: return fmt::format("scratch buffer {}", ref.index);
    case BufferRef::Kind::Workspace: return "the accuracy-level-4 workspace";
    case BufferRef::Kind::Null: break;
    }
    return "null";
}

StepBuilder::StepBuilder(std::string_view entry, std::string what)
{
    const jit::KernelSource* source = source_declaring(entry);
    if (source == nullptr) {
        fail_internal(fmt::format("no embedded kernel source declares entry '{}'", entry));
    }
    const jit::KernelEntry* declaration = source->entry(entry);
    declaration_ = declaration;
    step_.source = source->name();
    step_.entry = std::string(entry);
    step_.what = std::move(what);
    bound_.assign(declaration->parameters.size(), false);
    values_.resize(declaration->parameters.size());
}

void StepBuilder::bind(std::string_view parameter, KernelArg value, int kind)
{
    const auto& declaration = *static_cast<const jit::KernelEntry*>(declaration_);
    const int index = declaration.find(parameter);
    if (index < 0) {
        fail_internal(fmt::format("{} declares no parameter '{}'", step_.entry, parameter));
    }
    const auto slot = static_cast<std::size_t>(index);
    if (bound_[slot]) {
        fail_internal(fmt::format("parameter '{}' of {} is bound twice", parameter, step_.entry));
    }
    const int declared = static_cast<int>(declaration.parameters[slot].kind);
    if (declared != kind) {
        fail_internal(fmt::format("parameter '{}' of {} is declared {} but bound to {}", parameter, step_.entry,
                                  kind_name(declared), kind_name(kind)));
    }
    bound_[slot] = true;
    values_[slot] = value;
}

StepBuilder& StepBuilder::arg(std::string_view parameter, BufferRef value)
{
    bind(parameter, value, static_cast<int>(jit::KernelParameter::Kind::Pointer));
    return *this;
}

StepBuilder& StepBuilder::arg(std::string_view parameter, std::int32_t value)
{
    bind(parameter, value, static_cast<int>(jit::KernelParameter::Kind::Int32));
    return *this;
}

StepBuilder& StepBuilder::arg(std::string_view parameter, float value)
{
    bind(parameter, value, static_cast<int>(jit::KernelParameter::Kind::Float32));
    return *this;
}

StepBuilder& StepBuilder::arg(std::string_view parameter, const TensorMapArg& value)
{
    bind(parameter, value, static_cast<int>(jit::KernelParameter::Kind::TensorMap));
    return *this;
}

StepBuilder& StepBuilder::size_arg(std::string_view parameter, std::size_t value, std::string_view name)
{
    return arg(parameter, as_i32(name, value));
}

StepBuilder& StepBuilder::define(std::string name, std::int64_t value)
{
    step_.defines.push_back(fmt::format("{}={}", name, value));
    return *this;
}

StepBuilder& StepBuilder::grid(std::uint32_t x, std::uint32_t y, std::uint32_t z)
{
    step_.config.grid = Dim3{x, y, z};
    return *this;
}

StepBuilder& StepBuilder::block(std::uint32_t x, std::uint32_t y)
{
    step_.config.block = Dim3{x, y, 1};
    return *this;
}

StepBuilder& StepBuilder::shared_memory(std::uint32_t bytes, bool configure)
{
    step_.config.dynamic_shared_bytes = bytes;
    step_.configure_shared_memory = configure;
    return *this;
}

void StepBuilder::add_to(LaunchPlan& plan, const PlanRequest& request)
{
    const auto& declaration = *static_cast<const jit::KernelEntry*>(declaration_);
    for (std::size_t i = 0; i < bound_.size(); ++i) {
        if (!bound_[i]) {
            fail_internal(fmt::format("parameter '{}' of {} is not bound", declaration.parameters[i].name,
                                      step_.entry));
        }
    }
    const Capabilities& device = request.context.capabilities;
    const LaunchConfig& config = step_.config;
    const std::uint64_t threads = std::uint64_t{config.block.x} * config.block.y * config.block.z;
    if (threads == 0 || threads > device.max_threads_per_block) {
        fail_unsupported(fmt::format("{} needs {} threads per block, but {} allows at most {}", step_.what, threads,
                                     device.name, device.max_threads_per_block));
    }
    if (config.grid.x == 0 || config.grid.y == 0 || config.grid.z == 0 || config.grid.x > kMaxGridX ||
        config.grid.y > kMaxGridYZ || config.grid.z > kMaxGridYZ) {
        fail_unsupported(fmt::format("{} would need a grid of {}x{}x{} blocks, outside CUDA's launch limits "
                                     "(x up to {}, y and z up to {})",
                                     step_.what, config.grid.x, config.grid.y, config.grid.z, kMaxGridX, kMaxGridYZ));
    }
    if (config.dynamic_shared_bytes > device.max_shared_memory_per_block_optin) {
        fail_unsupported(fmt::format(
            "{} needs {} bytes of dynamic shared memory, but {} allows at most {} per block. Why: the kernel stages "
            "the whole activation row in shared memory. How to fix: use a GPU with more shared memory per block, "
            "KernelPolicy::Fastest, or a model whose hidden size fits",
            step_.what, config.dynamic_shared_bytes, device.name, device.max_shared_memory_per_block_optin));
    }
    // Every GPU nbits targets gives a block 48 KiB without opting in, which the original's fixed-size kernels rely
    // on; a device that reports less gets the opt-in the launch then needs.
    if (config.dynamic_shared_bytes > device.max_shared_memory_per_block) {
        step_.configure_shared_memory = true;
    }
    step_.args = values_;
    const bool gate_up = request.gate_up_slots();
    for (std::size_t i = 0; i < step_.args.size(); ++i) {
        const auto* ref = std::get_if<BufferRef>(&step_.args[i]);
        const TensorDesc* tensor = ref != nullptr ? referenced_tensor(*ref, request) : nullptr;
        if (tensor == nullptr) {
            continue;  // null and scratch pointers come aligned from the allocator
        }
        const jit::KernelParameter& parameter = declaration.parameters[i];
        std::uint32_t bytes = static_cast<std::uint32_t>(element_size(tensor->dtype));
        for (const jit::KernelParameter::Alignment& alignment : parameter.alignment) {
            if (alignment_applies(alignment.when, request, *tensor, step_)) {
                bytes = std::max(bytes, alignment.bytes);
            }
        }
        const AlignmentRequirement requirement{*ref, bytes, tensor_label(*ref, gate_up)};
        const bool listed =
            std::find(step_.alignment.begin(), step_.alignment.end(), requirement) != step_.alignment.end();
        if (bytes > 1 && !listed) {
            step_.alignment.push_back(requirement);
        }
    }
    plan.steps.push_back(std::move(step_));
}

std::uint32_t grid_extent(std::size_t value, std::size_t divisor, std::uint32_t limit, std::string_view what)
{
    const std::size_t blocks = div_ceil(value, divisor);
    if (blocks > limit) {
        fail_unsupported(fmt::format("{}={} exceeds CUDA's grid limits ({} blocks of {} where at most {} fit)", what,
                                     value, blocks, divisor, limit));
    }
    return static_cast<std::uint32_t>(blocks);
}

std::uint32_t clamped_grid(std::size_t value, std::size_t divisor)
{
    return static_cast<std::uint32_t>(std::clamp<std::size_t>(div_ceil(value, divisor), 1, kMaxGridYZ));
}

bool DownColumns::operator==(const DownColumns& o) const
{
    return columns == o.columns && std::strcmp(entry, o.entry) == 0;
}

F16GemvSelection select_f16_gemv_variant(std::size_t k, std::size_t n, std::size_t block_size, bool scales_fp16,
                                         bool has_zero_points)
{
    const bool down_eligible =
        !has_zero_points && scales_fp16 && block_size == kDownBlockSize && k % kDownBlockSize == 0 && k > n;
    if (down_eligible) {
        return {F16GemvVariant::DownProjection,
                "variant=down_projection;class=tall_skinny(K>N);block_size=32;scales=fp16;K%32==0"};
    }
    return {F16GemvVariant::General,
            has_zero_points ? "variant=general;zero_points=explicit;down_projection requires symmetric zp=8"
                            : "variant=general;class=not(tall_skinny K>N & block_size=32 & scales=fp16 & K%32==0)"};
}

DownColumns select_down_columns(std::size_t n, std::uint32_t multiprocessor_count)
{
    const std::size_t target = wave_target(multiprocessor_count, kDownFillCtasPerSm);
    for (const int columns : {8, 4}) {
        if (div_ceil(n, static_cast<std::size_t>(columns)) >= target) {
            return *down_columns_of(columns);
        }
    }
    return *down_columns_of(2);
}

DownColumns choose_down_columns(std::size_t n, std::uint32_t multiprocessor_count, const PlanOverrides& overrides)
{
    if (overrides.down_columns) {
        if (const std::optional<DownColumns> forced = down_columns_of(*overrides.down_columns)) {
            return *forced;
        }
    }
    return select_down_columns(n, multiprocessor_count);
}

std::uint32_t select_accuracy4_gemv_warps(std::size_t n, std::uint32_t multiprocessor_count,
                                          const PlanOverrides& overrides)
{
    if (overrides.accuracy4_warps) {
        const int forced = *overrides.accuracy4_warps;
        if (forced == 1 || forced == 2 || forced == 4 || forced == 8) {
            return static_cast<std::uint32_t>(forced);
        }
    }
    const std::size_t target = wave_target(multiprocessor_count, kAccuracy4FillCtasPerSm);
    for (const std::uint32_t warps : {8u, 4u, 2u}) {
        if (div_ceil(n, warps) >= target) {
            return warps;
        }
    }
    return 1;
}

bool use_accuracy4_stage64(std::size_t n, const Capabilities& device)
{
    if (device.max_shared_memory_per_block_optin < kAccuracy4Stage64SharedBytes) {
        return false;
    }
    const std::size_t resident_ctas = device.resident_warps_per_multiprocessor() / (kAccuracy4GemvThreads / 32);
    const std::size_t one_wave = wave_target(device.multiprocessor_count, resident_ctas);
    return div_ceil(n, kAccuracy4ColumnsPerBlock) < one_wave;
}

bool f16_gemv_uses_large_block(std::size_t k, std::size_t n)
{
    return !(n <= kGemvF16SmallNMax && k <= kGemvF16SmallNMax);
}

std::uint32_t f16_gemv_threads(std::size_t k, std::size_t n)
{
    return f16_gemv_uses_large_block(k, n) ? kGemvF16LargeThreads : kGemvF16SmallThreads;
}

LaunchPlan empty_plan(std::string variant, std::string reason)
{
    LaunchPlan plan;
    plan.variant = std::move(variant);
    plan.set_reason(std::move(reason));
    return plan;
}

void set_variant(LaunchPlan& plan, std::string variant, std::function<std::string()> reason)
{
    plan.variant = std::move(variant);
    plan.set_reason(std::move(reason));
}

void record_bias_stage(LaunchPlan& plan, bool has_bias, bool fold_bias_post_round)
{
    if (!has_bias) {
        return;
    }
    if (fold_bias_post_round) {
        plan.bias_stage = "qkv_bias_fused";
        plan.bias_stage_reason =
            "folded standalone Add(MatMulNBits, bias) into GEMV epilogue with fp16-after-round semantics "
            "fp16(fp16(acc)+bias) (token-identity preserved)";
    } else {
        plan.bias_stage = "bias_native";
        plan.bias_stage_reason = "native MatMulNBits bias: single-round epilogue fp16(acc+bias)";
    }
}

std::uint64_t matmul_flops(std::size_t m, std::size_t n, std::size_t k, bool has_bias)
{
    std::uint64_t flops = saturating_mul(saturating_mul(saturating_mul(m, n), k), 2);
    if (has_bias) {
        flops = saturating_add(flops, saturating_mul(m, n));
    }
    return flops;
}

std::uint64_t with_rmsnorm_flops(std::uint64_t flops, std::size_t m, std::size_t k)
{
    return saturating_add(saturating_add(flops, saturating_mul(saturating_mul(m, k), 4)), saturating_mul(m, 4));
}

std::uint64_t gate_up_flops(std::size_t m, std::size_t n, std::size_t k)
{
    return saturating_add(saturating_mul(saturating_mul(saturating_mul(m, n), k), 4),
                          saturating_mul(saturating_mul(m, n), 5));
}

void require_rmsnorm_width(std::size_t k)
{
    if (k % 128 != 0) {
        fail(fmt::format(
            "rmsnorm_prologue fusion requires K to be a multiple of 128, got K={}. Why: the fused RMS "
            "normalization reduces each row of A in 128-element chunks (32 lanes x half4) and has no tail, so the "
            "last {} elements of every row would be left out of the norm. How to fix: fuse only hidden sizes that "
            "are multiples of 128, run SkipSimplifiedLayerNormalization as its own node, or use "
            "KernelPolicy::Fastest, whose kernels have no such limit",
            k, k % 128));
    }
}

int add_scratch(LaunchPlan& plan, const PlanRequest& request, std::size_t bytes, std::string_view what)
{
    const std::uint64_t memory = request.context.capabilities.total_memory_bytes;
    if (memory != 0 && bytes > memory) {
        constexpr double gib = 1024.0 * 1024.0 * 1024.0;
        fail_unsupported(fmt::format("{} needs {:.1f} GiB of workspace, the device has {:.1f} GiB. How to fix: run "
                                     "fewer rows per call, or use KernelPolicy::Fastest, whose scratch is bounded",
                                     what, static_cast<double>(bytes) / gib, static_cast<double>(memory) / gib));
    }
    plan.scratch_bytes.push_back(bytes);
    return static_cast<int>(plan.scratch_bytes.size() - 1);
}

}  // namespace detail

LaunchPlan plan_matmul_nbits(const MatMulNBitsConfig& config, const std::vector<TensorDesc>& inputs,
                             const std::vector<TensorDesc>& outputs, const PlanContext& context)
{
    config.validate();
    const std::size_t max_inputs = config.gate_up_swiglu ? 8 : 7;
    if (inputs.size() < 3 || inputs.size() > max_inputs || outputs.size() != 1) {
        detail::fail(fmt::format("expected 3 to {} inputs and 1 output, got {} inputs and {} outputs", max_inputs,
                                 inputs.size(), outputs.size()));
    }
    const detail::PlanRequest request{config, inputs, outputs, context};
    const DataType activation = inputs[0].dtype;
    const bool half = activation == DataType::Float16 ||
                      (activation == DataType::BFloat16 && context.policy == KernelPolicy::Fastest);
    LaunchPlan plan;
    if (half) {
        plan = config.gate_up_swiglu ? detail::plan_gate_up_swiglu(request) : detail::plan_half(request);
    } else {
        plan = detail::plan_f32(request);
    }
    plan.policy = context.policy;
    return plan;
}

}  // namespace nbits::ops

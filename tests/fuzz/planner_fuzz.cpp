// Fuzz target: the planner (ops::plan_matmul_nbits), which decides every
// launch of a MatMulNBits run without touching a GPU. The bytes are a stream
// of choices (past its end every choice is 0, the well-formed one): node
// attributes (absent, mistyped, huge, negative), the raw config when the
// attributes are refused, tensor descriptors (absent, huge, overflowing,
// strided, of the wrong dtype or rank), the output list, the device (named
// sm_80 .. sm_120 parts, or made-up driver attributes), the decode-geometry
// overrides and the g_idx values the planner range-checks. Each input is
// planned under KernelPolicy::Original and KernelPolicy::Fastest.
//
// Invariants, re-checked here independently of the planner's own checks:
//  - a call returns a plan or throws nbits::Error (not Internal, with the
//    operator's message prefix); nothing else escapes, nothing crashes, hangs
//    or trips a sanitizer;
//  - every kernel launch names an embedded entry, binds each of its
//    parameters with the declared kind, and has a grid and block CUDA and the
//    device accept, dynamic shared memory within the opt-in limit (opted into
//    above the default budget);
//  - every buffer a step binds exists: a present, countable tensor slot with
//    the offset inside it, a planned scratch buffer, or the accuracy-4
//    workspace the node has; the output and every tensor the node consumes
//    are bound, every scratch buffer is used, the workspace adds up;
//  - cuBLASLt steps have dimensions in 1..2^31-1 and a workspace that fits;
//  - an empty plan exactly for an empty output; a plan never accepts g_idx
//    values outside 0..K blocks; Fastest's own kernels stay within their
//    64 MiB scratch budget;
//  - the policies agree: what Original plans, Fastest plans too (same flops,
//    same g_idx check); what Fastest refuses as an invalid argument, Original
//    does not plan; planning is deterministic.

#include "fuzz_driver.hpp"

#include "kernels.hpp"
#include "nbits/error.hpp"
#include "nbits/matmul_nbits.hpp"

#include <array>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

using namespace nbits;

namespace {

__extension__ typedef unsigned __int128 u128;

constexpr const char* kMessagePrefix = "cuda_ep MatMulNBits: ";
constexpr const char* kMadeUpDevice = "made-up device";
constexpr std::size_t kFastestScratchBudget = std::size_t{64} << 20;  // plan_fastest_prefill.cpp's kWorkspaceBudget

// The fuzz input as a stream of choices; past its end every choice is 0.
class Choices {
public:
    Choices(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}

    std::uint8_t byte() { return at_ < size_ ? data_[at_++] : 0; }
    std::uint64_t u64()
    {
        std::uint64_t value = 0;
        for (int i = 0; i < 8; ++i) {
            value = (value << 8) | byte();
        }
        return value;
    }
    template <typename T>
    const T& pick(const std::vector<T>& options)
    {
        return options[byte() % options.size()];
    }

    // 0: an exact value (the next 8 bytes); otherwise mostly edge values and
    // real model sizes, sometimes anything.
    std::uint64_t extent()
    {
        static const std::vector<std::uint64_t> interesting = {
            0, 1, 2, 3, 7, 8, 15, 16, 17, 31, 32, 33, 64, 96, 127, 128, 129, 255, 256, 896, 1000, 1024, 1152,
            2560, 3072, 3584, 4096, 4608, 4864, 6144, 8192, 9216, 14336, 18944, 28672, 65535, 65536, 131072,
            151936, 1048561, 0x7fffffffull, 0x80000000ull, 0xffffffffull, 1ull << 40, (1ull << 62) + 1, 1ull << 63,
            std::numeric_limits<std::uint64_t>::max()};
        switch (byte() % 5) {
        case 0: return u64();
        case 1: return u64() % 4096;
        case 2: return u64() % 0x80000000ull;  // within the kernels' 32-bit range
        default: return pick(interesting);
        }
    }

private:
    const std::uint8_t* data_;
    std::size_t size_;
    std::size_t at_ = 0;
};

// Writes the choices of a well-formed node, for the corpus (the mirror of Choices).
class Encoder {
public:
    Encoder& byte(std::uint8_t value)
    {
        bytes_.push_back(static_cast<char>(value));
        return *this;
    }
    Encoder& exact(std::uint64_t value)  // Choices::extent() and integer attributes: selector 0, then 8 bytes
    {
        byte(0);
        for (int shift = 56; shift >= 0; shift -= 8) {
            byte(static_cast<std::uint8_t>(value >> shift));
        }
        return *this;
    }
    const std::string& bytes() const { return bytes_; }

private:
    std::string bytes_;
};

const std::vector<DataType>& all_dtypes()
{
    static const std::vector<DataType> dtypes = {DataType::Float32, DataType::Float16, DataType::BFloat16,
                                                 DataType::Uint8,   DataType::Int8,    DataType::Int32,
                                                 DataType::Int64};
    return dtypes;
}

DataType any_dtype(Choices& c) { return c.pick(all_dtypes()); }

// Integer attribute: 0 exact, then mostly sensible, sometimes absent, mistyped or out of range.
void integer_attribute(Choices& c, NodeAttributes& attributes, const char* name,
                       const std::vector<std::int64_t>& sensible)
{
    switch (c.byte() % 8) {
    case 0: attributes.set(name, static_cast<std::int64_t>(c.u64())); return;
    case 1: attributes.set(name, static_cast<std::int64_t>(c.extent() & 0x7fffffffffffffffull)); return;
    case 2: return;  // absent
    case 3: attributes.set(name, std::string("4")); return;
    case 4: attributes.set(name, 4.0f); return;
    case 5: attributes.set(name, -static_cast<std::int64_t>(c.byte())); return;
    default: attributes.set(name, c.pick(sensible)); return;
    }
}

// The choices behind one node (the corpus writes them, the target reads them).
struct NodeSpec {
    std::uint64_t k = 0, n = 0, m = 1;
    std::uint64_t bits = 4, block_size = 32, accuracy_level = 0;
    bool folded_bias = false, gate_up = false, rmsnorm = false;
    std::uint8_t activation = 0;  // 0 fp16, 1 fp32, 2 bf16
    std::uint8_t scales = 0;      // 0 the activation's, 1 fp32
    std::uint8_t a_layout = 0;    // 0 [M, K], 1 [1, M, K]
    bool zero_points = false, g_idx = false, bias = false, gamma = false;
    std::uint8_t device = 0;      // index into devices()
};

const std::vector<Capabilities>& devices()
{
    static const std::vector<Capabilities> named = {Capabilities::a100(),      Capabilities::sm86_28(),
                                                    Capabilities::l4(),        Capabilities::rtx4090(),
                                                    Capabilities::sm89_46(),   Capabilities::h200(),
                                                    Capabilities::h100(),      Capabilities::h100_pcie(),
                                                    Capabilities::h20(),       Capabilities::rtx5090()};
    return named;
}

// The input slots follow the ONNX order [A, B, scales, zero_points, g_idx,
// bias, gamma], or the paired gate/up node's [A, W_gate, scales_gate, W_up,
// scales_up, gamma, zp_gate, zp_up]; the node uses the fewest that hold its tensors.
std::string encode(const NodeSpec& s)
{
    Encoder e;
    e.exact(s.k).exact(s.n).exact(s.bits).exact(s.block_size).exact(s.accuracy_level);
    e.byte(0);  // weight_prepacked absent
    e.byte(s.folded_bias ? 1 : 0).byte(s.gate_up ? 1 : 0).byte(s.rmsnorm ? 1 : 0);
    e.byte(0);  // epsilon absent
    e.byte(s.activation).byte(s.scales).exact(s.m).byte(s.a_layout);
    const int slots = s.gate_up ? (s.zero_points ? 8 : s.gamma ? 6 : 5) : (s.gamma ? 7 : s.bias ? 6 : s.g_idx ? 5 : s.zero_points ? 4 : 3);
    e.byte(static_cast<std::uint8_t>(slots - (s.gate_up ? 5 : 3)));
    for (int slot = 0; slot < slots; ++slot) {
        bool present = true;
        if (s.gate_up) {
            present = slot < 5 || (slot == 5 && s.gamma) || (slot >= 6 && s.zero_points);
            if (slot == 5) {
                e.byte(0);  // gamma of the activation's dtype
            }
        } else {
            present = slot < 3 || (slot == 3 && s.zero_points) || (slot == 4 && s.g_idx) || (slot == 5 && s.bias) ||
                      (slot == 6 && s.gamma);
            if (slot == 6) {
                e.byte(0);
            }
        }
        e.byte(present ? 0 : 1);  // well-formed, or absent
    }
    e.byte(0).byte(0);  // one output, well-formed
    e.byte(s.device).byte(0).byte(0);  // device, no overrides, in-range g_idx
    return e.bytes();
}

NodeAttributes attributes_of(Choices& c)
{
    NodeAttributes attributes;
    integer_attribute(c, attributes, "K", {896, 1152, 3584, 4096, 4864, 14336, 18944, 0x7fffffff, 0x80000000});
    integer_attribute(c, attributes, "N", {896, 1152, 3584, 4096, 4864, 14336, 151936, 0x7fffffff, 0x80000000});
    integer_attribute(c, attributes, "bits", {4, 8, 2, 3, 16});
    integer_attribute(c, attributes, "block_size", {16, 32, 64, 128, 256, 512, 1024, 1 << 30, 48, 8, 0});
    integer_attribute(c, attributes, "accuracy_level", {0, 1, 4});
    switch (c.byte() % 4) {
    case 1: attributes.set("weight_prepacked", std::int64_t{0}); break;
    case 2: attributes.set("weight_prepacked", std::int64_t{1}); break;
    default: break;
    }
    for (const char* marker : {ops::kFoldedBiasAttr, ops::kGateUpSwigluAttr, ops::kRmsNormPrologueAttr}) {
        switch (c.byte() % 4) {
        case 1: attributes.set(marker, std::int64_t{1}); break;
        case 2: attributes.set(marker, static_cast<std::int64_t>(c.byte())); break;
        default: break;
        }
    }
    switch (c.byte() % 5) {
    case 1: attributes.set(ops::kRmsNormEpsilonAttr, 1e-5f); break;
    case 2: attributes.set(ops::kRmsNormEpsilonAttr, std::numeric_limits<float>::quiet_NaN()); break;
    case 3: attributes.set(ops::kRmsNormEpsilonAttr, -std::numeric_limits<float>::infinity()); break;
    case 4: attributes.set(ops::kRmsNormEpsilonAttr, std::int64_t{1}); break;
    default: break;
    }
    return attributes;
}

// A descriptor: 0 (and most codes) the well-formed one, 1 absent, the rest broken.
TensorDesc tensor(Choices& c, DataType dtype, std::vector<std::size_t> shape, std::vector<std::size_t> alternative)
{
    TensorDesc d;
    d.dtype = dtype;
    d.shape = std::move(shape);
    switch (c.byte() % 24) {
    case 1: d.present = false; break;
    case 2: d.dtype = any_dtype(c); break;
    case 3:
        if (!d.shape.empty()) {
            d.shape[c.byte() % d.shape.size()] = static_cast<std::size_t>(c.extent());
        }
        break;
    case 4: d.shape.push_back(static_cast<std::size_t>(c.extent())); break;
    case 5:
        if (!d.shape.empty()) {
            d.shape.pop_back();
        }
        break;
    case 6:
        for (std::size_t i = 0; i < d.shape.size(); ++i) {
            d.strides.push_back(static_cast<std::int64_t>(c.u64()));
        }
        break;
    case 7: {  // dense strides, written out (wrapping on overflow)
        std::uint64_t stride = 1;
        d.strides.resize(d.shape.size());
        for (std::size_t i = d.shape.size(); i-- > 0;) {
            d.strides[i] = static_cast<std::int64_t>(stride);
            stride *= d.shape[i];
        }
        break;
    }
    case 8: d.shape = std::move(alternative); break;
    case 9: d.shape.insert(d.shape.begin(), static_cast<std::size_t>(c.extent())); break;
    case 10:  // strides of the wrong rank
        d.strides.assign(d.shape.size() + 1, 1);
        break;
    case 11: d.shape.clear(); break;
    default: break;
    }
    return d;
}

Capabilities device_of(Choices& c)
{
    const std::uint8_t choice = c.byte();
    if (choice < 0xe0) {
        return devices()[choice % devices().size()];
    }
    DeviceAttributes attributes;
    attributes.compute_major = c.byte() % 14;  // 0: a device the runtime refuses
    attributes.compute_minor = c.byte() % 10;
    attributes.max_threads_per_block = c.pick(std::vector<int>{0, 32, 64, 96, 128, 256, 512, 1024});
    attributes.max_threads_per_multiprocessor = c.pick(std::vector<int>{0, 32, 1024, 1536, 2048});
    attributes.max_shared_memory_per_block = c.pick(std::vector<int>{0, 1024, 48 * 1024, 99 * 1024});
    attributes.max_shared_memory_per_block_optin = c.pick(std::vector<int>{0, 1024, 48 * 1024, 99 * 1024, 227 * 1024});
    attributes.multiprocessor_count = c.pick(std::vector<int>{0, 1, 28, 132, 1000, 1 << 20});
    attributes.total_memory_bytes = c.pick(std::vector<std::uint64_t>{0, 1ull << 20, 64ull << 20, 24ull << 30});
    constexpr int kLargest = std::numeric_limits<int>::max();
    attributes.memory_clock_khz = c.pick(std::vector<int>{0, -1, 1, 1593000, 3201000, kLargest});
    attributes.memory_bus_width_bits = c.pick(std::vector<int>{0, -64, 1, 5120, 6144, kLargest});
    attributes.name = kMadeUpDevice;
    return Capabilities::from(attributes);  // nbits::Error(UnsupportedDevice) for major 0
}

ops::PlanOverrides overrides_of(Choices& c)
{
    switch (c.byte() % 4) {
    case 1: {
        const std::vector<std::optional<std::string>> texts = {std::nullopt, "8", "4", "2", "1", "3", "16", "+4",
                                                               "04", "", "-2", "4x", "99999999999999999999"};
        const std::optional<std::string> columns = c.pick(texts);
        const std::optional<std::string> warps = c.pick(texts);
        const std::optional<std::string> split = c.pick(texts);
        const std::optional<std::string> rows = c.pick(std::vector<std::optional<std::string>>{
            std::nullopt, "128", "256", "+256", "0256", "512", "64", "", "-256"});
        const std::optional<std::string> tokens = c.pick(std::vector<std::optional<std::string>>{
            std::nullopt, "128", "256", "+256", "512", "64", "", "-128"});
        std::map<std::string, std::string> variables;
        for (const auto& [name, text] :
             {std::pair{ops::kDownColumnsEnv, columns}, std::pair{ops::kAccuracy4WarpsEnv, warps},
              std::pair{ops::kPrefillSplitKEnv, split}, std::pair{ops::kPrefillWgmmaTileNEnv, rows},
              std::pair{ops::kPrefillWgmmaTileMEnv, tokens}}) {
            if (text) {
                variables[name] = *text;
            }
        }
        return ops::PlanOverrides::parse(variables);
    }
    case 2: {
        ops::PlanOverrides raw;
        const std::vector<int> values = {0, 1, 2, 3, 4, 8, 16, -1, std::numeric_limits<int>::max()};
        raw.down_columns = c.pick(values);
        raw.accuracy4_warps = c.pick(values);
        raw.prefill_split_k = c.pick(values);
        raw.prefill_wgmma_tile_n = c.pick(std::vector<int>{0, 128, 256, 512, -1});
        raw.prefill_wgmma_min_m = c.pick(std::vector<int>{0, 1, 16, 17, 33, 64, 65, 1 << 30, -1});
        raw.prefill_wgmma_tile_m = c.pick(std::vector<int>{0, 64, 128, 256, 512, -1});
        raw.prefill_producer_warps = c.pick(std::vector<int>{0, 1, 2, 3, 4, 8, -1});
        raw.prefill_tma = c.pick(std::vector<int>{0, 1, 2, -1});
        raw.prefill_tail_split = c.pick(std::vector<int>{0, 1, 2, -1});
        raw.prefill_wide_split = c.pick(std::vector<int>{0, 1, 2, -1});
        raw.prefill_stream_k = c.pick(std::vector<int>{0, 1, 2, -1});
        raw.prefill_register_handback = c.pick(std::vector<int>{0, 1, 2, -1});
        raw.decode_offset_codes = c.pick(std::vector<int>{0, 1, 2, -1});
        return raw;
    }
    default: return {};
    }
}

// What one planning call gave.
struct Outcome {
    std::optional<ops::LaunchPlan> plan;
    std::optional<ErrorKind> error;
    std::string message;
    bool read_out_of_range_g_idx = false;  // the g_idx reader handed out a value outside 0..K blocks
};

// Running totals, printed at the end.
struct Totals {
    std::uint64_t planner_calls = 0;
    std::array<std::uint64_t, 2> plans{};  // by policy
    std::map<std::string, std::uint64_t> errors;
    std::map<std::string, std::uint64_t> variants;
};

Totals& totals()
{
    static Totals t;
    return t;
}

struct Node {
    ops::MatMulNBitsConfig config;
    std::vector<TensorDesc> inputs;
    std::vector<TensorDesc> outputs;
    ops::PlanContext context;  // policy set per call
    std::uint8_t g_idx_pattern = 0;
    bool has_reader = false;
    bool made_up_device = false;  // driver attributes from the fuzz input, not a named part
};

Outcome plan_once(const Node& node, KernelPolicy policy)
{
    Outcome outcome;
    ops::PlanContext context = node.context;
    context.policy = policy;
    if (node.has_reader) {
        const std::uint8_t pattern = node.g_idx_pattern;
        const std::size_t block = node.config.block_size == 0 ? 1 : node.config.block_size;
        const std::size_t k_blocks = node.config.k / block + (node.config.k % block != 0 ? 1 : 0);
        bool* out_of_range = &outcome.read_out_of_range_g_idx;
        context.read_g_idx = [pattern, block, k_blocks, out_of_range](const TensorDesc& g_idx) {
            // The real reader copies numel values; a bounded prefix is enough for the range check.
            std::vector<std::int32_t> groups(std::min<std::size_t>(g_idx.numel(), std::size_t{1} << 16));
            for (std::size_t i = 0; i < groups.size(); ++i) {
                std::int64_t group = static_cast<std::int64_t>(i / block);  // 0: the natural layout
                if (pattern == 2 && i + 1 == groups.size()) {
                    group = static_cast<std::int64_t>(k_blocks);  // one past the last block
                } else if (pattern == 3 && i == 0) {
                    group = -1;
                } else if (pattern > 3) {
                    group = static_cast<std::int64_t>((i * pattern) % (k_blocks + 2)) - 1;
                }
                groups[i] = static_cast<std::int32_t>(group);
                if (group < 0 || static_cast<std::size_t>(group) >= k_blocks) {
                    *out_of_range = true;
                }
            }
            return groups;
        };
    }
    ++totals().planner_calls;
    try {
        outcome.plan = ops::plan_matmul_nbits(node.config, node.inputs, node.outputs, context);
    } catch (const Error& error) {
        outcome.error = error.kind();
        outcome.message = error.what();
    }
    // Anything else escapes to the driver, which reports it as a finding.
    return outcome;
}

bool slot_in(const std::vector<TensorDesc>& tensors, int index)
{
    return index >= 0 && static_cast<std::size_t>(index) < tensors.size();
}

// The invariants of a plan the planner accepted.
void check_plan(const ops::LaunchPlan& plan, const Node& node, KernelPolicy policy)
{
    const std::vector<TensorDesc>& inputs = node.inputs;
    const std::vector<TensorDesc>& outputs = node.outputs;
    const Capabilities& device = node.context.capabilities;
    const ops::MatMulNBitsConfig& config = node.config;
    fuzz::require(plan.policy == policy, "the plan records the policy it was planned under");
    fuzz::require(!plan.variant.empty() && !plan.reason().empty(), "a plan names its variant and its reason");
    fuzz::require(!outputs.empty() && outputs[0].present, "a plan has an output to write");
    fuzz::require(plan.empty() == (outputs[0].numel() == 0), "a plan launches nothing exactly for an empty output");

    u128 workspace = 0;
    for (const std::size_t bytes : plan.scratch_bytes) {
        fuzz::require(device.total_memory_bytes == 0 || bytes <= device.total_memory_bytes,
                      "no scratch buffer exceeds the device's memory");
        workspace += (static_cast<u128>(bytes) + 255) / 256 * 256;
    }
    fuzz::require(workspace <= std::numeric_limits<std::size_t>::max() && workspace == plan.workspace_bytes(),
                  "the workspace is the scratch buffers laid out 256-byte aligned, without overflow");
    if (policy == KernelPolicy::Fastest && plan.variant.rfind("nbits_", 0) == 0) {
        fuzz::require(plan.workspace_bytes() <= kFastestScratchBudget, "Fastest's own kernels stay within 64 MiB of scratch");
    }

    std::vector<bool> input_bound(inputs.size(), false);
    bool output_bound = false;
    std::vector<bool> scratch_used(plan.scratch_bytes.size(), false);
    auto check_ref = [&](const ops::BufferRef& ref) {
        switch (ref.kind) {
        case ops::BufferRef::Kind::Null: return;
        case ops::BufferRef::Kind::Input:
        case ops::BufferRef::Kind::Output: {
            const bool input = ref.kind == ops::BufferRef::Kind::Input;
            const std::vector<TensorDesc>& tensors = input ? inputs : outputs;
            fuzz::require(slot_in(tensors, ref.index), "a step binds an existing tensor slot");
            const TensorDesc& t = tensors[static_cast<std::size_t>(ref.index)];
            fuzz::require(t.present, "a step never binds an absent tensor");
            const std::optional<std::size_t> bytes = t.byte_count();
            fuzz::require(bytes.has_value(), "a step binds only tensors whose size fits 64 bits");
            fuzz::require(ref.offset == 0 || ref.offset < *bytes, "a tensor is bound at an offset inside it");
            if (input) {
                input_bound[static_cast<std::size_t>(ref.index)] = true;
            } else if (ref.index == 0) {
                output_bound = true;
            }
            return;
        }
        case ops::BufferRef::Kind::Scratch: {
            fuzz::require(ref.index >= 0 && static_cast<std::size_t>(ref.index) < plan.scratch_bytes.size(),
                          "a step binds a scratch buffer the plan has");
            const std::size_t bytes = plan.scratch_bytes[static_cast<std::size_t>(ref.index)];
            fuzz::require(ref.offset == 0 || ref.offset < bytes, "a scratch buffer is bound at an offset inside it");
            scratch_used[static_cast<std::size_t>(ref.index)] = true;
            return;
        }
        case ops::BufferRef::Kind::Workspace: {
            const std::size_t bytes = config.accuracy4_workspace_bytes();
            fuzz::require(bytes > 0, "only an accuracy-level-4 node binds the persistent workspace");
            fuzz::require(ref.offset < bytes, "the persistent workspace is bound at an offset inside it");
            return;
        }
        }
        throw fuzz::Finding("a buffer reference of an unknown kind");
    };

    for (const ops::PlanStep& planned : plan.steps) {
        if (const auto* step = std::get_if<ops::KernelStep>(&planned)) {
            fuzz::require(!step->what.empty(), "a launch is named for its errors");
            const jit::KernelSource* source = nullptr;
            for (const jit::KernelSource& candidate : kernels::all()) {
                if (candidate.name() == step->source) {
                    source = &candidate;
                }
            }
            fuzz::require(source != nullptr, "a launch names an embedded kernel source");
            const jit::KernelEntry* entry = source->entry(step->entry);
            fuzz::require(entry != nullptr, "a launch names an entry its source declares");
            fuzz::require(step->args.size() == entry->parameters.size(), "a launch binds every parameter of its entry");
            for (std::size_t i = 0; i < step->args.size(); ++i) {
                const ops::KernelArg& arg = step->args[i];
                switch (entry->parameters[i].kind) {
                case jit::KernelParameter::Kind::Pointer:
                    fuzz::require(std::holds_alternative<ops::BufferRef>(arg), "a pointer parameter gets a buffer");
                    check_ref(std::get<ops::BufferRef>(arg));
                    break;
                case jit::KernelParameter::Kind::Int32:
                    fuzz::require(std::holds_alternative<std::int32_t>(arg), "an int parameter gets an int");
                    fuzz::require(std::get<std::int32_t>(arg) >= 0, "int arguments (sizes, strides, flags) are not negative");
                    break;
                case jit::KernelParameter::Kind::Float32:
                    fuzz::require(std::holds_alternative<float>(arg), "a float parameter gets a float");
                    break;
                case jit::KernelParameter::Kind::TensorMap:
                    fuzz::require(std::holds_alternative<ops::TensorMapArg>(arg), "a tensor-map parameter gets a map");
                    check_ref(std::get<ops::TensorMapArg>(arg).base);
                    break;
                default: throw fuzz::Finding("a launch of an entry with a parameter the planner cannot pass");
                }
            }
            const LaunchConfig& geometry = step->config;
            const std::uint64_t threads = std::uint64_t{geometry.block.x} * geometry.block.y * geometry.block.z;
            fuzz::require(geometry.block.x >= 1 && geometry.block.y >= 1 && geometry.block.z >= 1 &&
                              geometry.block.x <= 1024 && geometry.block.y <= 1024 && geometry.block.z <= 64,
                          "block dimensions within CUDA's limits (x, y <= 1024, z <= 64)");
            fuzz::require(threads <= 1024 && threads <= device.max_threads_per_block,
                          "threads per block within CUDA's and the device's limit");
            fuzz::require(geometry.grid.x >= 1 && geometry.grid.y >= 1 && geometry.grid.z >= 1 &&
                              geometry.grid.x <= 0x7fffffffu && geometry.grid.y <= 65535 && geometry.grid.z <= 65535,
                          "grid dimensions within CUDA's limits (x < 2^31, y and z <= 65535)");
            fuzz::require(geometry.dynamic_shared_bytes <= device.max_shared_memory_per_block_optin,
                          "dynamic shared memory within the device's opt-in limit");
            fuzz::require(geometry.dynamic_shared_bytes <= device.max_shared_memory_per_block ||
                              step->configure_shared_memory,
                          "dynamic shared memory above the default budget is opted into");
            for (const ops::AlignmentRequirement& alignment : step->alignment) {
                fuzz::require(alignment.buffer.kind == ops::BufferRef::Kind::Input ||
                                  alignment.buffer.kind == ops::BufferRef::Kind::Output,
                              "alignment is required of caller tensors only");
                check_ref(alignment.buffer);
                fuzz::require(alignment.bytes >= 1 && alignment.bytes <= 256 &&
                                  (alignment.bytes & (alignment.bytes - 1)) == 0,
                              "an alignment is a power of two up to 256");
                fuzz::require(!alignment.tensor.empty(), "an alignment names its tensor");
            }
        } else {
            const auto& gemm = std::get<ops::GemmStep>(planned);
            fuzz::require(!gemm.a.is_null() && !gemm.w.is_null() && !gemm.y.is_null(), "a GEMM binds A, W and Y");
            for (const ops::BufferRef* ref : {&gemm.a, &gemm.w, &gemm.y, &gemm.bias, &gemm.workspace}) {
                check_ref(*ref);
            }
            fuzz::require(gemm.dtype == DataType::Float32 || gemm.dtype == DataType::Float16 ||
                              gemm.dtype == DataType::BFloat16,
                          "a GEMM runs in fp32, fp16 or bf16");
            const std::size_t limit = 0x7fffffff;
            fuzz::require(gemm.m >= 1 && gemm.k >= 1 && gemm.n >= 1 && gemm.m <= limit && gemm.k <= limit &&
                              gemm.n <= limit,
                          "GEMM dimensions within 1..2^31-1");
            fuzz::require(gemm.ldy == 0 || gemm.ldy >= gemm.n, "a GEMM's Y row stride holds a row");
            if (gemm.workspace.kind == ops::BufferRef::Kind::Scratch) {
                const std::size_t bytes = plan.scratch_bytes[static_cast<std::size_t>(gemm.workspace.index)];
                fuzz::require(gemm.workspace_bytes <= bytes - std::min(bytes, gemm.workspace.offset),
                              "a GEMM's workspace fits its scratch buffer");
            } else {
                fuzz::require(gemm.workspace.is_null() == (gemm.workspace_bytes == 0),
                              "a GEMM's workspace size matches its buffer");
            }
        }
    }

    if (plan.empty()) {
        return;
    }
    fuzz::require(output_bound, "a plan writes its output");
    for (std::size_t i = 0; i < scratch_used.size(); ++i) {
        fuzz::require(scratch_used[i], "every planned scratch buffer is used");
    }
    // Every tensor the node consumes reaches a launch: an input the plan drops
    // would be silently ignored (a wrong result, not an error).
    const bool gate_up_slots = config.gate_up_swiglu && inputs[0].dtype != DataType::Float32;
    for (std::size_t slot = 0; slot < inputs.size(); ++slot) {
        if (!inputs[slot].present || inputs[slot].numel() == 0) {
            continue;
        }
        const bool gamma = gate_up_slots ? slot == 5 : slot == 6;
        if (gamma && !config.rmsnorm_prologue) {
            continue;  // gamma is read only by the RMS-norm prologue
        }
        fuzz::require(input_bound[slot], gate_up_slots ? "every gate/up input the node consumes is bound"
                                                       : "every input the node consumes is bound");
    }
    if (config.rmsnorm_prologue) {
        const std::size_t gamma = gate_up_slots ? 5 : 6;
        fuzz::require(gamma < inputs.size() && input_bound[gamma], "an RMS-norm prologue node reads gamma");
    }
    if (config.gate_up_swiglu) {
        fuzz::require(inputs.size() > 4 && input_bound[3] && input_bound[4], "a gate/up node reads the up projection");
    }
}

void check_error(const Outcome& outcome)
{
    if (*outcome.error == ErrorKind::Internal) {
        throw fuzz::Finding("an input reaches an internal error: " + outcome.message);
    }
    if (outcome.message.rfind(kMessagePrefix, 0) != 0 || outcome.message.size() <= std::strlen(kMessagePrefix)) {
        throw fuzz::Finding("a planner error lacks the operator's prefix or says nothing: " + outcome.message);
    }
}

std::string error_key(KernelPolicy policy, ErrorKind kind)
{
    return std::string(policy == KernelPolicy::Original ? "original " : "fastest ") + to_string(kind);
}

// The node the choices describe, or nothing for a device the runtime refuses.
std::optional<Node> decode(const std::uint8_t* data, std::size_t size)
{
    Choices c(data, size);
    Node node;
    const NodeAttributes attributes = attributes_of(c);
    try {
        node.config = ops::MatMulNBitsConfig::from_attributes(attributes);
    } catch (const Error& error) {
        // Out of range or mistyped: InvalidArgument; valid ONNX this engine does not implement (bits=3): Unsupported.
        if (error.kind() != ErrorKind::InvalidArgument && error.kind() != ErrorKind::Unsupported) {
            throw fuzz::Finding(std::string("refused attributes are an invalid argument or unsupported, not ") +
                                to_string(error.kind()) + ": " + error.what());
        }
        // Plan the raw struct instead, which the planner must refuse or plan soundly.
        node.config.k = static_cast<std::size_t>(c.extent());
        node.config.n = static_cast<std::size_t>(c.extent());
        node.config.bits = c.byte() % 10;
        node.config.block_size = static_cast<std::size_t>(c.extent());
        node.config.accuracy_level = static_cast<std::int8_t>(c.byte());
        node.config.gate_up_swiglu = c.byte() % 4 == 0;
        node.config.rmsnorm_prologue = c.byte() % 4 == 0;
    }
    const ops::MatMulNBitsConfig& config = node.config;

    const std::uint8_t activation_choice = c.byte();
    const DataType activation =
        activation_choice < 0xf0
            ? std::vector<DataType>{DataType::Float16, DataType::Float32, DataType::BFloat16}[activation_choice % 3]
            : any_dtype(c);
    const std::uint8_t scales_choice = c.byte();
    const DataType scales = scales_choice < 0xf0
                                ? std::vector<DataType>{activation, DataType::Float32, DataType::Float16,
                                                        DataType::BFloat16}[scales_choice % 4]
                                : any_dtype(c);
    const std::size_t m = static_cast<std::size_t>(c.extent());
    const std::size_t k = config.k;
    const std::size_t n = config.n;
    // The sizes of a well-formed node, computed without overflow traps of their own.
    const std::size_t block = config.block_size == 0 ? 1 : config.block_size;
    const std::size_t k_blocks = k / block + (k % block != 0 ? 1 : 0);
    const std::size_t blob = block * config.bits / 8;
    const std::size_t zp_row = (k_blocks * config.bits + 7) / 8;
    const std::size_t padded_k = k_blocks * block;

    std::vector<std::size_t> leading;
    switch (c.byte() % 4) {
    case 1: leading = {1, m}; break;
    case 2: leading = {m, 1}; break;
    case 3: break;  // rank-1 A: M is 1
    default: leading = {m}; break;
    }
    auto with_leading = [&](std::size_t last) {
        std::vector<std::size_t> shape = leading;
        shape.push_back(last);
        return shape;
    };
    const std::size_t rows = leading.empty() ? 1 : m;

    const bool gate_up = config.gate_up_swiglu;
    const std::uint8_t count_choice = c.byte();
    const std::size_t slots = count_choice >= 0xf0 ? count_choice % 10
                              : gate_up              ? 5 + count_choice % 4
                                                     : 3 + count_choice % 5;
    for (std::size_t slot = 0; slot < slots; ++slot) {
        if (slot == 0) {
            node.inputs.push_back(tensor(c, activation, with_leading(k), {rows * k}));
            continue;
        }
        const int kind = gate_up ? static_cast<int>(slot) : static_cast<int>(slot) + 100;
        switch (kind) {
        case 1: case 3: case 101: node.inputs.push_back(tensor(c, DataType::Uint8, {n, k_blocks, blob}, {n, k_blocks * blob})); break;
        case 2: case 4: case 102: node.inputs.push_back(tensor(c, scales, {n, k_blocks}, {n * k_blocks})); break;
        case 6: case 7: case 103: node.inputs.push_back(tensor(c, DataType::Uint8, {n, zp_row}, {n * zp_row})); break;
        case 104: node.inputs.push_back(tensor(c, DataType::Int32, {k}, {padded_k})); break;
        case 105: node.inputs.push_back(tensor(c, activation, {n}, with_leading(n))); break;
        case 5: case 106: {
            const std::uint8_t gamma_choice = c.byte();
            const DataType gamma = gamma_choice % 4 == 0 ? activation : gamma_choice % 4 == 1 ? DataType::Float32 : any_dtype(c);
            node.inputs.push_back(tensor(c, gamma, {k}, {1, k}));
            break;
        }
        default: node.inputs.push_back(tensor(c, any_dtype(c), {k}, {n})); break;  // a slot past the node's last
        }
    }
    const std::uint8_t output_choice = c.byte();
    const std::size_t output_count = output_choice == 0xff ? 2 : output_choice == 0xfe ? 0 : 1;
    for (std::size_t i = 0; i < output_count; ++i) {
        node.outputs.push_back(tensor(c, activation, with_leading(n), {rows * n}));
    }

    try {
        node.context.capabilities = device_of(c);
        node.made_up_device = node.context.capabilities.name == kMadeUpDevice;
    } catch (const Error& error) {
        fuzz::require(error.kind() == ErrorKind::UnsupportedDevice, "a device the runtime refuses is UnsupportedDevice");
        return std::nullopt;
    }
    node.context.overrides = overrides_of(c);
    const std::uint8_t reader_choice = c.byte();
    node.has_reader = reader_choice != 1;
    node.g_idx_pattern = reader_choice;
    return node;
}

std::string describe_tensor(const TensorDesc& t)
{
    if (!t.present) {
        return "absent";
    }
    std::string text = std::string(to_string(t.dtype)) + format_shape(t.shape);
    if (!t.strides.empty()) {
        text += " strides";
        for (const std::int64_t stride : t.strides) {
            text += " " + std::to_string(stride);
        }
    }
    return text;
}

std::string describe_outcome(const Outcome& outcome)
{
    if (outcome.plan) {
        return "plan " + outcome.plan->variant + " (" + std::to_string(outcome.plan->steps.size()) + " steps, " +
               std::to_string(outcome.plan->workspace_bytes()) + " scratch bytes)";
    }
    return std::string(to_string(*outcome.error)) + ": " + outcome.message.substr(0, 300);
}

// The request, for a finding's report.
std::string describe(const Node& node, const Outcome& original, const Outcome& fastest)
{
    const ops::MatMulNBitsConfig& c = node.config;
    const Capabilities& d = node.context.capabilities;
    std::string text = "\n  node: K=" + std::to_string(c.k) + " N=" + std::to_string(c.n) +
                       " bits=" + std::to_string(c.bits) + " block_size=" + std::to_string(c.block_size) +
                       " accuracy_level=" + std::to_string(c.accuracy_level) +
                       (c.fold_bias_post_round ? " folded_bias" : "") + (c.gate_up_swiglu ? " gate_up_swiglu" : "") +
                       (c.rmsnorm_prologue ? " rmsnorm_prologue" : "");
    for (std::size_t i = 0; i < node.inputs.size(); ++i) {
        text += "\n  input " + std::to_string(i) + ": " + describe_tensor(node.inputs[i]);
    }
    for (std::size_t i = 0; i < node.outputs.size(); ++i) {
        text += "\n  output " + std::to_string(i) + ": " + describe_tensor(node.outputs[i]);
    }
    text += "\n  device: " + d.name + " sm_" + std::to_string(d.sm()) + ", " +
            std::to_string(d.multiprocessor_count) + " SMs, " + std::to_string(d.max_threads_per_block) +
            " threads/block, shared " + std::to_string(d.max_shared_memory_per_block) + "/" +
            std::to_string(d.max_shared_memory_per_block_optin) + ", memory " + std::to_string(d.total_memory_bytes);
    const ops::PlanOverrides& o = node.context.overrides;
    text += "\n  overrides: down_columns=" + (o.down_columns ? std::to_string(*o.down_columns) : "-") +
            " accuracy4_warps=" + (o.accuracy4_warps ? std::to_string(*o.accuracy4_warps) : "-") +
            "; g_idx reader " + (node.has_reader ? "pattern " + std::to_string(node.g_idx_pattern) : "none");
    text += "\n  Original: " + describe_outcome(original) + "\n  Fastest: " + describe_outcome(fastest);
    return text;
}

void check_outcomes(const Node& node, const Outcome& original, const Outcome& fastest, std::size_t size)
{
    for (const auto& [policy, outcome] : {std::pair{KernelPolicy::Original, &original},
                                          std::pair{KernelPolicy::Fastest, &fastest}}) {
        const char* name = policy == KernelPolicy::Original ? "Original: " : "Fastest: ";
        if (outcome->plan) {
            try {
                check_plan(*outcome->plan, node, policy);
            } catch (const fuzz::Finding& finding) {
                throw fuzz::Finding(name + std::string(finding.what()));
            }
            fuzz::require(!outcome->read_out_of_range_g_idx, "a plan never accepts g_idx values outside 0..K blocks");
            fuzz::require(!outcome->plan->describe().empty() && !outcome->plan->to_json().empty(),
                          "a plan renders as text and JSON");
            ++totals().plans[policy == KernelPolicy::Original ? 0 : 1];
            ++totals().variants[outcome->plan->variant];
        } else {
            try {
                check_error(*outcome);
            } catch (const fuzz::Finding& finding) {
                throw fuzz::Finding(name + std::string(finding.what()));
            }
            ++totals().errors[error_key(policy, *outcome->error)];
        }
    }

    // The policies differ only in the launches they choose.
    if (original.plan) {
        // A made-up device may have too little memory for Fastest's scratch.
        fuzz::require(fastest.plan.has_value() || (node.made_up_device && fastest.error == ErrorKind::Unsupported),
                      "what Original plans, Fastest plans too");
    }
    if (original.plan && fastest.plan) {
        fuzz::require(original.plan->flops == fastest.plan->flops, "both policies report the node's flops");
        fuzz::require(original.plan->checks_group_indices == fastest.plan->checks_group_indices,
                      "both policies range-check g_idx alike");
    }
    // Original validates everything Fastest does (and checks its own kernels' limits first).
    if (fastest.error == ErrorKind::InvalidArgument) {
        fuzz::require(!original.plan.has_value(), "what Fastest refuses as an invalid argument, Original refuses too");
    }

    // Planning is pure: the same request gives the same plan.
    if (size % 8 == 0) {
        const Outcome again = plan_once(node, KernelPolicy::Original);
        fuzz::require(again.plan.has_value() == original.plan.has_value() && again.message == original.message,
                      "planning is deterministic");
        if (again.plan) {
            fuzz::require(again.plan->to_json() == original.plan->to_json() &&
                              again.plan->reason() == original.plan->reason(),
                          "planning is deterministic");
        }
    }
}

void fuzz_planner(const std::uint8_t* data, std::size_t size)
{
    const std::optional<Node> decoded = decode(data, size);
    if (!decoded) {
        return;
    }
    const Node& node = *decoded;
    const Outcome original = plan_once(node, KernelPolicy::Original);
    const Outcome fastest = plan_once(node, KernelPolicy::Fastest);
    try {
        check_outcomes(node, original, fastest, size);
    } catch (const fuzz::Finding& finding) {
        throw fuzz::Finding(finding.what() + describe(node, original, fastest));
    }
}

std::string refused_corpus_node(const NodeSpec& s, const std::string& original, const std::string& fastest)
{
    return "corpus node K=" + std::to_string(s.k) + " N=" + std::to_string(s.n) + " M=" + std::to_string(s.m) +
           " bits=" + std::to_string(s.bits) + " block_size=" + std::to_string(s.block_size) +
           " activation=" + std::to_string(s.activation) + (s.gate_up ? " gate_up" : "") +
           (s.rmsnorm ? " rmsnorm" : "") + " plans under neither policy:\n  Original: " + original +
           "\n  Fastest: " + fastest;
}

// Real model nodes (Qwen2.5-0.5B/7B, Llama-3-8B, Phi-3.5-mini projections) on
// every path: decode and prefill, fp16, fp32 and bf16, zero points, g_idx,
// bias, accuracy level 4, int8, the RMS-norm prologue and the paired gate/up
// node, over the named devices.
std::vector<std::string> corpus()
{
    struct Shape {
        std::uint64_t k, n;
    };
    const std::vector<Shape> shapes = {{896, 1152},   {896, 4864},  {4864, 896},   {3584, 4608}, {18944, 3584},
                                       {4096, 6144},  {14336, 4096}, {4096, 14336}, {3072, 9216}, {8192, 3072},
                                       {896, 151936}, {100, 1000}};
    std::vector<NodeSpec> specs;
    std::size_t at = 0;
    for (const Shape& shape : shapes) {
        for (const std::uint64_t m : {1, 7, 64, 300, 0}) {
            NodeSpec s;
            s.k = shape.k;
            s.n = shape.n;
            s.m = m;
            s.device = static_cast<std::uint8_t>(at++ % devices().size());
            specs.push_back(s);  // fp16, fp16 scales, block 32, int4, symmetric

            NodeSpec f32 = s;
            f32.activation = 1;
            f32.block_size = 128;
            f32.zero_points = true;
            specs.push_back(f32);
            f32.g_idx = true;
            f32.bias = true;
            specs.push_back(f32);
            f32 = s;
            f32.activation = 1;
            f32.accuracy_level = 4;
            specs.push_back(f32);
            f32.bits = 8;
            f32.block_size = 64;
            specs.push_back(f32);

            NodeSpec variant = s;
            variant.zero_points = true;
            variant.bias = true;
            variant.folded_bias = true;
            variant.scales = 1;
            specs.push_back(variant);
            variant = s;
            variant.activation = 2;
            variant.bits = 8;
            specs.push_back(variant);
            variant = s;
            variant.rmsnorm = true;
            variant.gamma = true;
            specs.push_back(variant);
            variant.a_layout = 1;
            variant.gate_up = true;
            specs.push_back(variant);
            variant.rmsnorm = false;
            variant.gamma = false;
            variant.zero_points = true;
            specs.push_back(variant);
        }
    }
    // A corpus the planner refuses would fuzz error paths only: each node
    // must plan under at least one policy.
    std::vector<std::string> inputs;
    for (const NodeSpec& spec : specs) {
        const std::string input = encode(spec);
        const std::optional<Node> node = decode(reinterpret_cast<const std::uint8_t*>(input.data()), input.size());
        const Outcome original = plan_once(*node, KernelPolicy::Original);
        const Outcome fastest = plan_once(*node, KernelPolicy::Fastest);
        if (!original.plan && !fastest.plan) {
            throw std::invalid_argument(refused_corpus_node(spec, original.message, fastest.message));
        }
        inputs.push_back(input);
    }
    totals() = {};
    return inputs;
}

}  // namespace

int main(int argc, char** argv)
{
    const int status = fuzz::main_with(argc, argv, "planner_fuzz", corpus,
                                       [](const std::uint8_t* data, std::size_t size) { fuzz_planner(data, size); });
    const Totals& t = totals();
    if (t.planner_calls > 0) {
        std::printf("planner_fuzz: %llu planner calls; plans: %llu Original, %llu Fastest, %zu variants\n",
                    static_cast<unsigned long long>(t.planner_calls), static_cast<unsigned long long>(t.plans[0]),
                    static_cast<unsigned long long>(t.plans[1]), t.variants.size());
        for (const auto& [key, count] : t.errors) {
            std::printf("planner_fuzz:   %s errors: %llu\n", key.c_str(), static_cast<unsigned long long>(count));
        }
    }
    return status;
}

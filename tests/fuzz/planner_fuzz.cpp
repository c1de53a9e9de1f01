// Fuzz target of the planner: bytes become node attributes, tensor
// descriptors (absent, huge, overflowing, strided, inconsistent) and device
// capabilities; the planner must return a plan the device can launch over
// tensors that can exist, or throw nbits::Error. Anything else (another
// exception, a crash, a sanitizer report, a plan that breaks a launch limit or
// a size bound re-checked here in 128-bit arithmetic) is a finding.

#include "planner_fuzz.hpp"

#include "nbits/error.hpp"
#include "nbits/matmul_nbits.hpp"

#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

namespace nbits::fuzz {
namespace {

using u128 = unsigned __int128;

// Reads the fuzz input as a stream of choices; past its end every choice is 0.
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
    bool flag() { return (byte() & 1) != 0; }

    // Mostly edge values and real model sizes, sometimes anything.
    std::uint64_t extent()
    {
        static const std::vector<std::uint64_t> interesting = {
            0, 1, 2, 3, 7, 8, 15, 16, 17, 31, 32, 33, 64, 96, 127, 128, 129, 255, 256, 896, 1000, 1024, 1152,
            2560, 3584, 4096, 4864, 8192, 14336, 18944, 28672, 65535, 65536, 131072, 1048561, 0x7fffffffull,
            0x80000000ull, 0xffffffffull, 1ull << 40, (1ull << 62) + 1, 1ull << 63, std::numeric_limits<std::uint64_t>::max()};
        switch (byte() % 4) {
        case 0: return u64();
        case 1: return u64() % 4096;
        default: return pick(interesting);
        }
    }

private:
    const std::uint8_t* data_;
    std::size_t size_;
    std::size_t at_ = 0;
};

[[noreturn]] void finding(const std::string& what)
{
    std::fprintf(stderr, "planner fuzz finding: %s\n", what.c_str());
    std::abort();
}

DataType any_dtype(Choices& c)
{
    static const std::vector<DataType> dtypes = {DataType::Float32, DataType::Float16, DataType::BFloat16,
                                                 DataType::Uint8,   DataType::Int8,    DataType::Int32,
                                                 DataType::Int64};
    return c.pick(dtypes);
}

NodeAttributes attributes_of(Choices& c)
{
    NodeAttributes attributes;
    auto integer = [&](const char* name, std::int64_t sensible) {
        switch (c.byte() % 8) {
        case 0: return;  // absent
        case 1: attributes.set(name, std::string("4")); return;
        case 2: attributes.set(name, 4.0f); return;
        case 3: attributes.set(name, static_cast<std::int64_t>(c.u64())); return;
        case 4: attributes.set(name, -static_cast<std::int64_t>(c.byte())); return;
        default: attributes.set(name, sensible); return;
        }
    };
    integer("K", static_cast<std::int64_t>(c.extent() & 0x7fffffffffffffffull));
    integer("N", static_cast<std::int64_t>(c.extent() & 0x7fffffffffffffffull));
    integer("bits", c.pick(std::vector<std::int64_t>{4, 8, 2, 3, 16}));
    integer("block_size", c.pick(std::vector<std::int64_t>{16, 32, 64, 128, 256, 512, 1024, 1 << 30, 48, 8, 0}));
    integer("accuracy_level", c.pick(std::vector<std::int64_t>{0, 1, 4}));
    if (c.flag()) {
        attributes.set("weight_prepacked", static_cast<std::int64_t>(c.byte() % 2));
    }
    for (const char* marker : {ops::kFoldedBiasAttr, ops::kGateUpSwigluAttr, ops::kRmsNormPrologueAttr}) {
        switch (c.byte() % 4) {
        case 0: attributes.set(marker, std::int64_t{1}); break;
        case 1: attributes.set(marker, static_cast<std::int64_t>(c.byte())); break;
        default: break;
        }
    }
    if (c.flag()) {
        attributes.set(ops::kRmsNormEpsilonAttr, c.flag() ? 1e-5f : std::numeric_limits<float>::quiet_NaN());
    }
    return attributes;
}

// A descriptor that is usually the well-formed one and sometimes broken.
TensorDesc tensor(Choices& c, DataType dtype, std::vector<std::size_t> shape)
{
    TensorDesc d;
    d.dtype = dtype;
    d.shape = std::move(shape);
    switch (c.byte() % 16) {
    case 0: d.present = false; break;
    case 1: d.dtype = any_dtype(c); break;
    case 2:
        if (!d.shape.empty()) {
            d.shape[c.byte() % d.shape.size()] = static_cast<std::size_t>(c.extent());
        }
        break;
    case 3: d.shape.push_back(static_cast<std::size_t>(c.extent())); break;
    case 4:
        if (!d.shape.empty()) {
            d.shape.pop_back();
        }
        break;
    case 5:
        for (std::size_t i = 0; i < d.shape.size(); ++i) {
            d.strides.push_back(static_cast<std::int64_t>(c.u64()));
        }
        break;
    case 6: {
        // Dense strides, written out.
        std::int64_t stride = 1;
        d.strides.resize(d.shape.size());
        for (std::size_t i = d.shape.size(); i-- > 0;) {
            d.strides[i] = stride;
            stride = static_cast<std::int64_t>(static_cast<std::uint64_t>(stride) * d.shape[i]);
        }
        break;
    }
    default: break;
    }
    return d;
}

Capabilities device_of(Choices& c)
{
    static const std::vector<Capabilities> named = {Capabilities::h200(), Capabilities::a100(), Capabilities::l4(),
                                                    Capabilities::sm86_28(), Capabilities::rtx5090()};
    Capabilities device = c.pick(named);
    if (c.byte() % 4 == 0) {
        DeviceAttributes attributes;
        attributes.compute_major = 8 + c.byte() % 5;
        attributes.compute_minor = c.byte() % 10;
        attributes.max_threads_per_block = c.pick(std::vector<int>{0, 32, 64, 128, 256, 1024});
        attributes.max_threads_per_multiprocessor = c.pick(std::vector<int>{0, 1024, 1536, 2048});
        attributes.max_shared_memory_per_block = c.pick(std::vector<int>{0, 1024, 48 * 1024});
        attributes.max_shared_memory_per_block_optin = c.pick(std::vector<int>{0, 1024, 99 * 1024, 227 * 1024});
        attributes.multiprocessor_count = c.pick(std::vector<int>{0, 1, 28, 132, 1000});
        attributes.total_memory_bytes = c.pick(std::vector<std::uint64_t>{0, 1ull << 20, 24ull << 30});
        attributes.name = "fuzzed";
        device = Capabilities::from(attributes);
    }
    return device;
}

// The invariants of a plan the planner accepted.
void check_plan(const ops::LaunchPlan& plan, const std::vector<TensorDesc>& inputs,
                const std::vector<TensorDesc>& outputs, const Capabilities& device)
{
    u128 workspace = 0;
    for (const std::size_t bytes : plan.scratch_bytes) {
        if (device.total_memory_bytes != 0 && bytes > device.total_memory_bytes) {
            finding("a scratch buffer larger than the device's memory was planned");
        }
        workspace += (static_cast<u128>(bytes) + 255) / 256 * 256;
    }
    if (workspace > std::numeric_limits<std::size_t>::max() || workspace != plan.workspace_bytes()) {
        finding("the planned workspace overflows or does not add up");
    }
    auto check_ref = [&](const ops::BufferRef& ref) {
        const std::vector<TensorDesc>* tensors = ref.kind == ops::BufferRef::Kind::Input    ? &inputs
                                                 : ref.kind == ops::BufferRef::Kind::Output ? &outputs
                                                                                           : nullptr;
        if (ref.kind == ops::BufferRef::Kind::Scratch &&
            (ref.index < 0 || static_cast<std::size_t>(ref.index) >= plan.scratch_bytes.size())) {
            finding("a step refers to a scratch buffer the plan does not have");
        }
        if (tensors == nullptr) {
            return;
        }
        if (ref.index < 0 || static_cast<std::size_t>(ref.index) >= tensors->size()) {
            finding("a step refers to a tensor slot past the end");
        }
        const TensorDesc& t = (*tensors)[static_cast<std::size_t>(ref.index)];
        if (!t.present) {
            finding("a step binds an absent tensor");
        }
        if (!t.byte_count()) {
            finding("a step binds a tensor whose size overflows");
        }
    };
    for (const ops::PlanStep& planned : plan.steps) {
        if (const auto* step = std::get_if<ops::KernelStep>(&planned)) {
            const LaunchConfig& config = step->config;
            const u128 threads = static_cast<u128>(config.block.x) * config.block.y * config.block.z;
            if (threads == 0 || threads > device.max_threads_per_block) {
                finding(step->entry + ": block beyond the device's threads per block");
            }
            if (config.grid.x == 0 || config.grid.y == 0 || config.grid.z == 0 || config.grid.x > 0x7fffffffu ||
                config.grid.y > 65535 || config.grid.z > 65535) {
                finding(step->entry + ": grid beyond CUDA's limits");
            }
            if (config.dynamic_shared_bytes > device.max_shared_memory_per_block_optin) {
                finding(step->entry + ": dynamic shared memory beyond the opt-in limit");
            }
            for (const ops::KernelArg& arg : step->args) {
                if (const auto* ref = std::get_if<ops::BufferRef>(&arg)) {
                    check_ref(*ref);
                } else if (const auto* value = std::get_if<std::int32_t>(&arg); value != nullptr && *value < 0) {
                    finding(step->entry + ": a negative size argument");
                }
            }
        } else {
            const auto& gemm = std::get<ops::GemmStep>(planned);
            for (const ops::BufferRef* ref : {&gemm.a, &gemm.w, &gemm.y, &gemm.bias, &gemm.workspace}) {
                check_ref(*ref);
            }
            const u128 limit = 0x7fffffff;
            if (gemm.m == 0 || gemm.k == 0 || gemm.n == 0 || gemm.m > limit || gemm.k > limit || gemm.n > limit) {
                finding("a cuBLASLt GEMM with dimensions outside 1..2^31-1");
            }
            if (static_cast<u128>(gemm.k) * gemm.n * 4 > std::numeric_limits<std::size_t>::max() ||
                static_cast<u128>(gemm.m) * gemm.k * 4 > std::numeric_limits<std::size_t>::max()) {
                finding("a cuBLASLt GEMM whose operand sizes overflow");
            }
        }
    }
}

}  // namespace

void fuzz_planner(const std::uint8_t* data, std::size_t size)
{
    Choices c(data, size);
    const NodeAttributes attributes = attributes_of(c);
    ops::MatMulNBitsConfig config;
    try {
        config = ops::MatMulNBitsConfig::from_attributes(attributes);
    } catch (const Error&) {
        // Attributes the operator refuses; plan the raw struct instead, which the planner must refuse too.
        config.k = static_cast<std::size_t>(c.extent());
        config.n = static_cast<std::size_t>(c.extent());
        config.bits = c.byte() % 10;
        config.block_size = static_cast<std::size_t>(c.extent());
    }
    const DataType activation = c.byte() % 8 == 0 ? any_dtype(c)
                                                   : c.pick(std::vector<DataType>{DataType::Float16, DataType::Float32,
                                                                                  DataType::BFloat16});
    const DataType scales = c.flag() ? activation : c.pick(std::vector<DataType>{DataType::Float32, DataType::Float16});
    const std::size_t m = static_cast<std::size_t>(c.byte() % 3 == 0 ? c.extent() : c.byte() % 20);
    const std::size_t k = config.k;
    const std::size_t n = config.n;
    // Sizes of a well-formed node, computed without overflow traps of their own.
    const std::size_t block = config.block_size == 0 ? 1 : config.block_size;
    const std::size_t k_blocks = k / block + (k % block != 0 ? 1 : 0);
    const std::size_t blob = block * config.bits / 8;
    const std::size_t zp_row = (k_blocks * config.bits + 7) / 8;

    std::vector<TensorDesc> inputs;
    inputs.push_back(tensor(c, activation, {m, k}));
    inputs.push_back(tensor(c, DataType::Uint8, {n, k_blocks, blob}));
    inputs.push_back(tensor(c, scales, {n, k_blocks}));
    const std::size_t extra = c.byte() % 6;
    if (config.gate_up_swiglu) {
        for (std::size_t i = 0; i < extra; ++i) {
            static const int slots[] = {3, 4, 5, 6, 7};
            switch (slots[i % 5]) {
            case 3: inputs.push_back(tensor(c, DataType::Uint8, {n, k_blocks, blob})); break;
            case 4: inputs.push_back(tensor(c, scales, {n, k_blocks})); break;
            case 5: inputs.push_back(tensor(c, c.flag() ? activation : DataType::Float32, {k})); break;
            default: inputs.push_back(tensor(c, DataType::Uint8, {n, zp_row})); break;
            }
        }
    } else {
        for (std::size_t i = 0; i < extra; ++i) {
            switch (i) {
            case 0: inputs.push_back(tensor(c, DataType::Uint8, {n, zp_row})); break;
            case 1: inputs.push_back(tensor(c, DataType::Int32, {k})); break;
            case 2: inputs.push_back(tensor(c, activation, {n})); break;
            case 3: inputs.push_back(tensor(c, c.flag() ? activation : DataType::Float32, {k})); break;
            default: inputs.push_back(tensor(c, activation, {k})); break;
            }
        }
    }
    std::vector<TensorDesc> outputs = {tensor(c, activation, {m, n})};
    if (c.byte() % 32 == 0) {
        outputs.push_back(outputs.front());
    }

    ops::PlanContext context;
    context.capabilities = device_of(c);
    context.policy = c.flag() ? KernelPolicy::Fastest : KernelPolicy::Original;
    if (c.flag()) {
        const std::uint8_t pattern = c.byte();
        context.read_g_idx = [pattern, k_blocks](const TensorDesc& g_idx) {
            std::vector<std::int32_t> groups(std::min<std::size_t>(g_idx.numel(), 1 << 16));
            for (std::size_t i = 0; i < groups.size(); ++i) {
                groups[i] = pattern == 0 ? -1 : static_cast<std::int32_t>((i * pattern) % (k_blocks + 1));
            }
            return groups;
        };
    }
    try {
        const ops::LaunchPlan plan = ops::plan_matmul_nbits(config, inputs, outputs, context);
        check_plan(plan, inputs, outputs, context.capabilities);
        (void)plan.reason();
        (void)plan.to_json();
    } catch (const Error& error) {
        if (error.kind() == ErrorKind::Internal) {
            finding(std::string("an internal error: ") + error.what());
        }
        if (std::string(error.what()).empty()) {
            finding("an error without a message");
        }
    } catch (const std::exception& error) {
        finding(std::string("an exception that is not nbits::Error: ") + error.what());
    }
}

}  // namespace nbits::fuzz

// Hostile and careless input to the planner: every request either plans
// launches the device can run, over tensors that can exist, or fails with an
// nbits::Error that says why, before anything is allocated.

#include "matmul_nbits_fixtures.hpp"

#include "ops/plan_internal.hpp"

#include <limits>

using namespace nbits;
using namespace nbits::ops;
using test::desc;
using test::error_kind;
using test::error_message;
using test::node;
using test::problem;

namespace {

test::Shapes f16(std::size_t m = 1)
{
    test::Shapes shapes;
    shapes.m = m;
    return shapes;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("a prefill M beyond CUDA's 65535 grid rows is refused, not planned with grid.y = 65536")
{
    const std::size_t m = 1'048'561;  // ceil(m / 16) = 65536
    for (const NodeAttributes& attributes :
         {node(4096, 4096), test::marked(node(2560, 4096), kRmsNormPrologueAttr),
          test::marked(node(2560, 4096), kGateUpSwigluAttr)}) {
        test::Shapes shapes = f16(m);
        if (attributes.has(kRmsNormPrologueAttr)) {
            shapes.gamma = DataType::Float16;
        }
        const test::Problem p = problem(attributes, shapes);
        CHECK(contains(error_message(p), "M=1048561 exceeds CUDA's grid limits"));
        CHECK(error_kind(p) == ErrorKind::Unsupported);
    }
    // One row less fits.
    CHECK(problem(node(4096, 4096), f16(1'048'560)).plan().steps.size() == 1);
}

TEST_CASE("required inputs passed as absent are refused")
{
    for (const std::size_t slot : {std::size_t{0}, std::size_t{1}, std::size_t{2}}) {
        CAPTURE(slot);
        test::Problem p = problem(node(256, 128));
        p.inputs[slot].present = false;
        CHECK(contains(error_message(p), "is required but was passed as absent"));
    }
    test::Problem y = problem(node(256, 128));
    y.outputs[0].present = false;
    CHECK(contains(error_message(y), "Y is required but was passed as absent"));
    for (const std::size_t slot : {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{4}}) {
        CAPTURE(slot);
        test::Problem p = problem(test::marked(node(256, 128), kGateUpSwigluAttr));
        p.inputs[slot].present = false;
        CHECK(contains(error_message(p), "is required but was passed as absent"));
    }
    test::Problem f32 = problem(node(256, 128), [] {
        test::Shapes shapes;
        shapes.activation = DataType::Float32;
        return shapes;
    }());
    f32.inputs[1].present = false;
    CHECK(error_message(f32) == test::prefixed("B is required but was passed as absent. How to fix: pass the tensor "
                                               "(Tensor::dense); only optional inputs may be Tensor::absent"));
}

TEST_CASE("the f32 dequantize + cuBLASLt path bounds M to the kernels' 32-bit range")
{
    test::Shapes shapes;
    shapes.activation = DataType::Float32;
    shapes.m = std::size_t{1} << 40;
    const test::Problem p = problem(node(4, 8), shapes);
    CHECK(contains(error_message(p), "M=1099511627776 exceeds the 32-bit int range"));
}

TEST_CASE("an M beyond the 32-bit range is refused under both kernel policies, with the same message")
{
    // Found by the planner fuzzer: Fastest planned dequantize + cuBLASLt with M = 2^49.
    for (const int bits : {4, 8}) {
        for (const DataType activation : {DataType::Float16, DataType::Float32}) {
            CAPTURE(bits);
            test::Shapes shapes = f16(std::size_t{1} << 49);
            shapes.activation = activation;
            test::Problem p = problem(node(896, 1152, bits), shapes);
            const std::string original = error_message(p);
            CHECK(contains(original, "M=562949953421312 exceeds the 32-bit int range"));
            p.context.policy = KernelPolicy::Fastest;
            CHECK(error_message(p) == original);
            CHECK(error_kind(p) == ErrorKind::Unsupported);
        }
    }
    test::Shapes bf16 = f16(std::size_t{1} << 49);
    bf16.activation = DataType::BFloat16;
    test::Problem p = problem(node(896, 1152), bf16);
    p.context.policy = KernelPolicy::Fastest;
    CHECK(contains(error_message(p), "M=562949953421312 exceeds the 32-bit int range"));
}

TEST_CASE("a prefill too long for one plan's launches is refused or left to the original, never planned for hours")
{
    // Found by the planner fuzzer: a normalized gate/up node with K = 14336 and M near 2^31 was being planned as
    // millions of passes of dequantize + cuBLASLt launches.
    const NodeAttributes attributes =
        test::marked(test::marked(node(14336, 4096), kGateUpSwigluAttr), kRmsNormPrologueAttr);
    const auto shapes = [](std::size_t m, DataType activation) {
        test::Shapes s = f16(m);
        s.activation = activation;
        s.gamma = activation;
        return s;
    };
    test::Problem bf16 = problem(attributes, shapes(std::size_t{1} << 30, DataType::BFloat16));
    bf16.context.policy = KernelPolicy::Fastest;
    CHECK(contains(error_message(bf16), "beyond the 65536 launches one plan holds. How to fix: run the rows in "
                                        "batches of at most"));
    CHECK(error_kind(bf16) == ErrorKind::Unsupported);

    // fp16 goes to the original's path, which refuses this M with its own message under both policies.
    test::Problem f16_node = problem(attributes, shapes(std::size_t{1} << 30, DataType::Float16));
    const std::string original = error_message(f16_node);
    f16_node.context.policy = KernelPolicy::Fastest;
    CHECK(error_message(f16_node) == original);

    // A long prompt still plans nbits' kernels, in far fewer launches than the bound.
    test::Problem prompt = problem(attributes, shapes(32768, DataType::BFloat16));
    prompt.context.policy = KernelPolicy::Fastest;
    const LaunchPlan plan = prompt.plan();
    CHECK(plan.variant == "nbits_prefill_dequantize_cublaslt");
    CHECK(plan.steps.size() > 64);
    CHECK(plan.steps.size() < 65536);
}

TEST_CASE("a K whose weight chunk outgrows Fastest's scratch budget leaves the node to the original's path")
{
    // Found by the planner fuzzer: at K = 2^30 one 64-column chunk is 128 GiB, and Fastest refused a node the
    // original plans (device memory exceeded) instead of handing it over. One weight set takes the stream-K grid,
    // which needs no chunk, unless NBITS_PREFILL_STREAM_K=0.
    const std::size_t k = std::size_t{1} << 30;
    for (const NodeAttributes& attributes : {node(k, 256), test::marked(node(k, 256), kGateUpSwigluAttr)}) {
        for (const std::optional<int> stream_k : {std::optional<int>{}, std::optional<int>{0}}) {
            test::Problem p = problem(attributes, f16(300));
            p.context.capabilities.total_memory_bytes = std::uint64_t{12} << 30;
            p.context.overrides.prefill_stream_k = stream_k;
            const std::string original = p.plan().variant;
            p.context.policy = KernelPolicy::Fastest;
            const bool streamed = !stream_k && !attributes.has(kGateUpSwigluAttr);
            CHECK(p.plan().variant == (streamed ? "nbits_prefill_wgmma" : original));
        }
    }
}

TEST_CASE("a Float32 node marked with a half-precision fusion is refused, not run without it")
{
    // Found by the planner fuzzer: an fp32 node with rmsnorm_prologue planned dequantize + cuBLASLt and left gamma
    // unread (the original ignores the marker on fp32 and returns the un-normalized product).
    test::Shapes shapes = f16(300);
    shapes.activation = DataType::Float32;
    shapes.gamma = DataType::Float32;
    for (const KernelPolicy policy : {KernelPolicy::Original, KernelPolicy::Fastest}) {
        for (const std::size_t m : {std::size_t{1}, std::size_t{300}}) {
            CAPTURE(m);
            shapes.m = m;
            test::Problem norm = problem(test::marked(node(18944, 3584), kRmsNormPrologueAttr), shapes);
            norm.context.policy = policy;
            CHECK(error_message(norm) ==
                  test::prefixed("the rmsnorm_prologue fusion has no kernel for Float32 activations: Y would be "
                                 "computed without the normalization weight at input 6. How to fix: pass Float16 "
                                 "(or, under KernelPolicy::Fastest, BFloat16) activations, or run "
                                 "SimplifiedLayerNormalization as its own node"));
            CHECK(error_kind(norm) == ErrorKind::Unsupported);
        }
    }
    test::Shapes paired = f16(4);
    paired.activation = DataType::Float32;
    const test::Problem gate_up = problem(test::marked(node(896, 4864), kGateUpSwigluAttr), paired);
    CHECK(contains(error_message(gate_up), "the gate/up SwiGLU fusion has no kernel for Float32 activations"));
    // Without the marker the same tensors plan.
    shapes.gamma.reset();
    CHECK_FALSE(problem(node(18944, 3584), shapes).plan().steps.empty());
}

TEST_CASE("element counts that overflow 64 bits are never mistaken for small or contiguous tensors")
{
    const std::size_t huge = std::size_t{1} << 62;
    TensorDesc wrapped = desc(DataType::Float16, {huge, 4});
    CHECK_FALSE(wrapped.element_count().has_value());
    CHECK(wrapped.numel() == std::numeric_limits<std::size_t>::max());
    wrapped.strides = {1, static_cast<std::int64_t>(huge)};
    CHECK_FALSE(wrapped.is_contiguous());
    // The dense-stride product of [2^62 + 1, 4] would overflow int64 (UBSan flagged it).
    TensorDesc over = desc(DataType::Float16, {huge + 1, 4});
    over.strides = {4, 1};
    CHECK_FALSE(over.is_contiguous());
    CHECK_FALSE(desc(DataType::Float32, {huge, 2}).byte_count().has_value());
    CHECK(desc(DataType::Float32, {0, huge, huge}).element_count() == std::size_t{0});

    // A bias of 2^63 + 1 rows of 2 is not "2 elements".
    test::Shapes shapes = f16();
    shapes.bias = true;
    test::Problem p = problem(node(256, 2), shapes);
    p.inputs[5].shape = {(std::size_t{1} << 63) + 1, 2};
    CHECK(contains(error_message(p), "bias must have 2 elements"));

    // An activation whose byte size cannot be counted.
    test::Problem a = problem(node(4, 8));
    a.inputs[0].shape = {huge, 4};
    a.outputs[0].shape = {huge, 8};
    CHECK(contains(error_message(a), "holds more bytes than a 64-bit size can count"));
}

TEST_CASE("dynamic shared memory beyond the device's opt-in limit is refused when planned")
{
    test::Shapes shapes = f16();
    shapes.gamma = DataType::Float16;
    // The fused RMS-norm decode stages K halves: 256 KiB at K = 131072; the H200 allows 227 KiB.
    const test::Problem p = problem(test::marked(node(131072, 64), kRmsNormPrologueAttr), shapes);
    CHECK(contains(error_message(p), "needs 262144 bytes of dynamic shared memory, but NVIDIA H200 allows at most "
                                     "232448"));
    CHECK(error_kind(p) == ErrorKind::Unsupported);
    // 96 KiB fits the H200 and not an sm_86 part with 99 KiB opt-in minus nothing: it fits both.
    CHECK(problem(test::marked(node(49152, 64), kRmsNormPrologueAttr), shapes).plan().steps.size() == 1);
}

TEST_CASE("dynamic shared memory above a device's reported default budget is opted into")
{
    // Found by the planner fuzzer: the accuracy-4 GEMV's few KiB of dynamic shared memory were launched without the
    // opt-in on a device that reports a 1 KiB default per block. On a real GPU (48 KiB) the original's launch stays.
    test::Shapes shapes = f16();
    shapes.activation = DataType::Float32;
    NodeAttributes attributes = node(896, 4864);
    attributes.set("accuracy_level", std::int64_t{4});
    test::Problem p = problem(attributes, shapes);
    const auto opted_in = [](const LaunchPlan& plan) {
        std::size_t with_shared = 0;
        std::size_t opted = 0;
        for (const PlanStep& step : plan.steps) {
            const KernelStep* kernel = std::get_if<KernelStep>(&step);
            if (kernel != nullptr && kernel->config.dynamic_shared_bytes > 1024) {
                ++with_shared;
                opted += kernel->configure_shared_memory ? 1 : 0;
            }
        }
        return std::pair{with_shared, opted};
    };
    const auto [h200_shared, h200_opted] = opted_in(p.plan());
    CHECK(h200_shared >= 1);
    CHECK(h200_opted == 0);
    p.context.capabilities.max_shared_memory_per_block = 1024;
    const auto [small_shared, small_opted] = opted_in(p.plan());
    CHECK(small_shared == h200_shared);
    CHECK(small_opted == small_shared);
}

TEST_CASE("scratch that cannot exist is refused with what it needs and what the device has")
{
    test::Shapes shapes = f16(2'147'483'647);
    shapes.gamma = DataType::Float16;
    const test::Problem norm = problem(test::marked(node(2560, 64), kRmsNormPrologueAttr), shapes);
    CHECK(contains(error_message(norm), "the RMS-normalized activation needs 10240.0 GiB of workspace, the device "
                                        "has 140.0 GiB"));
    // K x N x 4 bytes of dequantized weights at the 32-bit limits: 16 EiB.
    test::Shapes f32;
    f32.activation = DataType::Float32;
    f32.m = 2;
    const test::Problem dequant = problem(node(2'147'483'647, 2'147'483'647, 8, 1 << 30), f32);
    CHECK(contains(error_message(dequant), "the dequantized f32 weight needs 17179869168.0 GiB of workspace, the "
                                           "device has 140.0 GiB"));
    CHECK_THROWS_WITH_AS(detail::checked_product(std::size_t{1} << 40, std::size_t{1} << 30, "a size"),
                         doctest::Contains("a size = 1099511627776 * 1073741824 overflows a 64-bit size"), Error);
}

TEST_CASE("a config built by hand is validated at the planner's door")
{
    const test::Problem good = problem(node(256, 128));
    for (const auto& [field, value] :
         {std::pair{"block_size", 0}, std::pair{"block_size", 48}, std::pair{"k", 0}, std::pair{"n", 0},
          std::pair{"bits", 3}}) {
        CAPTURE(field);
        test::Problem p = good;
        if (std::string(field) == "block_size") {
            p.config.block_size = static_cast<std::size_t>(value);
        } else if (std::string(field) == "k") {
            p.config.k = 0;
        } else if (std::string(field) == "n") {
            p.config.n = 0;
        } else {
            p.config.bits = 3;
        }
        CHECK_THROWS_AS(p.plan(), Error);
    }
    const MatMulNBitsConfig defaulted;
    CHECK_THROWS_WITH_AS(plan_matmul_nbits(defaulted, good.inputs, good.outputs, good.context),
                         doctest::Contains("attribute 'K' must be in 1..2147483647, got 0"), Error);
}

TEST_CASE("the planner keeps every block within the device's threads per block")
{
    test::Problem p = problem(node(4096, 4096));
    p.context.capabilities.max_threads_per_block = 128;
    CHECK(contains(error_message(p), "needs 256 threads per block, but NVIDIA H200 allows at most 128"));
}

// Every tensor check of the original, with its exact message, and the checks
// nbits adds where the original relied on its graph optimizer.

#include "matmul_nbits_fixtures.hpp"

#include <fmt/format.h>

#include <functional>

using namespace nbits;
using namespace nbits::ops;
using test::desc;
using test::error_kind;
using test::error_message;
using test::node;
using test::prefixed;
using test::Problem;
using test::problem;

namespace {

test::Shapes f32(std::size_t m = 1)
{
    test::Shapes shapes;
    shapes.activation = DataType::Float32;
    shapes.m = m;
    return shapes;
}

test::Shapes f16(std::size_t m = 1)
{
    test::Shapes shapes;
    shapes.m = m;
    return shapes;
}

test::Shapes everything(test::Shapes shapes)
{
    shapes.zero_points = true;
    shapes.bias = true;
    return shapes;
}

TensorDesc strided(TensorDesc tensor)
{
    // Every other element: twice the dense strides, never row-major for a tensor with an extent above 1.
    tensor.strides.assign(tensor.shape.size(), 0);
    std::int64_t dense = 2;
    for (std::size_t i = tensor.shape.size(); i-- > 0;) {
        tensor.strides[i] = dense;
        dense *= static_cast<std::int64_t>(tensor.shape[i]);
    }
    return tensor;
}

// One thing wrong with a valid problem, and the message it must produce.
struct Fault {
    std::function<void(Problem&)> apply;
    std::string message;
};

// With faults i..n-1 applied, the error must be fault i's: every message is
// right, and several problems are reported in the original's order.
void check_reported_in_order(const Problem& valid, const std::vector<Fault>& faults)
{
    for (std::size_t i = 0; i < faults.size(); ++i) {
        Problem p = valid;
        for (std::size_t j = i; j < faults.size(); ++j) {
            faults[j].apply(p);
        }
        CAPTURE(i);
        CHECK(error_message(p) == prefixed(faults[i].message));
    }
    CHECK_NOTHROW(valid.plan());
}

Fault wrong_dtype(std::size_t slot, DataType dtype, std::string message)
{
    return {[slot, dtype](Problem& p) { p.inputs[slot].dtype = dtype; }, std::move(message)};
}

Fault wrong_output_dtype(DataType dtype, std::string message)
{
    return {[dtype](Problem& p) { p.outputs[0].dtype = dtype; }, std::move(message)};
}

Fault non_contiguous(std::size_t slot, const std::string& name)
{
    return {[slot](Problem& p) { p.inputs[slot] = strided(p.inputs[slot]); },
            name + " must be contiguous on the CUDA execution provider"};
}

Fault non_contiguous_output()
{
    return {[](Problem& p) { p.outputs[0] = strided(p.outputs[0]); },
            "Y must be contiguous on the CUDA execution provider"};
}

NodeAttributes rms(NodeAttributes attributes) { return test::marked(std::move(attributes), kRmsNormPrologueAttr); }
NodeAttributes gate_up(NodeAttributes attributes) { return test::marked(std::move(attributes), kGateUpSwigluAttr); }

}  // namespace

TEST_CASE("a node takes 3 to 7 inputs (8 when paired) and exactly 1 output")
{
    Problem p = problem(node(64, 32), f32());
    p.inputs.resize(2);
    CHECK(error_message(p) == prefixed("expected 3 to 7 inputs and 1 output, got 2 inputs and 1 outputs"));
    p = problem(node(64, 32), f32());
    p.inputs.push_back(test::absent());
    CHECK(error_message(p) == prefixed("expected 3 to 7 inputs and 1 output, got 8 inputs and 1 outputs"));
    p = problem(node(64, 32), f32());
    p.outputs.push_back(p.outputs[0]);
    CHECK(error_message(p) == prefixed("expected 3 to 7 inputs and 1 output, got 7 inputs and 2 outputs"));

    Problem paired = problem(gate_up(node(128, 64)), f16());
    paired.inputs.push_back(test::absent());
    CHECK(error_message(paired) == prefixed("expected 3 to 8 inputs and 1 output, got 9 inputs and 1 outputs"));
    paired = problem(gate_up(node(128, 64)), f16());
    paired.inputs.resize(4);
    CHECK(error_message(paired) ==
          prefixed("gate/up SwiGLU fusion expects 5 to 8 inputs [x, W_gate, scales_gate, W_up, scales_up, (gamma), "
                   "(zp_gate, zp_up)] and 1 output, got 4 inputs and 1 outputs"));
}

TEST_CASE("f32 activations: dtype checks in the original's order")
{
    check_reported_in_order(problem(node(64, 32), f32()),
                            {wrong_dtype(0, DataType::Int32, "A must have dtype Float32, got Int32"),
                             wrong_dtype(1, DataType::Int8, "B must have dtype Uint8, got Int8"),
                             wrong_dtype(2, DataType::Float16, "scales must have dtype Float32, got Float16"),
                             wrong_output_dtype(DataType::Float16, "Y must have dtype Float32, got Float16")});
}

TEST_CASE("f32 activations: shapes of A, Y, B, scales, zero points and bias")
{
    Problem p = problem(node(64, 32), f32());
    p.inputs[0].shape = {1, 63};
    CHECK(error_message(p) == prefixed("A must have rank >= 1 and last dimension K=64, got [1, 63]"));
    p.inputs[0].shape = {};
    CHECK(error_message(p) == prefixed("A must have rank >= 1 and last dimension K=64, got []"));
    p = problem(node(64, 32), f32(2));
    p.outputs[0].shape = {32};
    CHECK(error_message(p) == prefixed("Y must have shape [2, 32], got [32]"));
    p = problem(node(64, 32), f32());
    p.inputs[1].shape = {32, 2, 32};
    CHECK(error_message(p) == prefixed("B must have shape [32, 2, 16], got [32, 2, 32]"));
    p = problem(node(64, 32), f32());
    p.inputs[2].shape = {32, 3};
    CHECK(error_message(p) == prefixed("scales must have shape [64] or [32, 2], got [32, 3]"));
    p.inputs[2].shape = {64};
    CHECK_NOTHROW(p.plan());

    p = problem(node(64, 32), everything(f32()));
    p.inputs[3].dtype = DataType::Int8;
    CHECK(error_message(p) == prefixed("zero_points must have dtype Uint8, got Int8"));
    p = problem(node(64, 32), everything(f32()));
    p.inputs[3].shape = {32, 2};
    CHECK(error_message(p) == prefixed("zero_points must have shape [32] or [32, 1], got [32, 2]"));
    p = problem(node(64, 32), everything(f32()));
    p.inputs[5].dtype = DataType::Float16;
    CHECK(error_message(p) == prefixed("bias must have dtype Float32, got Float16"));
    p = problem(node(64, 32), everything(f32()));
    p.inputs[5].shape = {1, 32};
    CHECK(error_message(p) == prefixed("bias must have shape [32], got [1, 32]"));
}

TEST_CASE("f32 activations: g_idx dtype, contiguity, shape and the range of every group index")
{
    test::Shapes shapes = f32(3);
    shapes.g_idx = true;
    Problem p = problem(node(60, 32), shapes);
    p.inputs[4].dtype = DataType::Int64;
    CHECK(error_message(p) == prefixed("g_idx must have dtype Int32, got Int64"));
    p = problem(node(60, 32), shapes);
    p.inputs[4].strides = {2};
    CHECK(error_message(p) == prefixed("g_idx must be contiguous on the CUDA execution provider"));
    p = problem(node(60, 32), shapes);
    p.inputs[4].shape = {61};
    CHECK(error_message(p) == prefixed("g_idx must have shape [60] or [64], got [61]"));
    p.inputs[4].shape = {64};
    CHECK_NOTHROW(p.plan());

    p = problem(node(60, 32), shapes);
    p.context.read_g_idx = [](const TensorDesc&) { return std::vector<std::int32_t>{0, 1, 2, 1}; };
    CHECK(error_message(p) == prefixed("g_idx[2]=2 is outside 0..2"));
    p.context.read_g_idx = [](const TensorDesc&) { return std::vector<std::int32_t>{0, -1}; };
    CHECK(error_message(p) == prefixed("g_idx[1]=-1 is outside 0..2"));

    // The range check comes before the bias checks, as in the original.
    shapes.bias = true;
    p = problem(node(60, 32), shapes);
    p.inputs[5].shape = {31};
    p.context.read_g_idx = [](const TensorDesc&) { return std::vector<std::int32_t>{5}; };
    CHECK(error_message(p) == prefixed("g_idx[0]=5 is outside 0..2"));
}

TEST_CASE("a plan from descriptors alone cannot range-check g_idx and says how to fix it")
{
    test::Shapes shapes = f32();
    shapes.g_idx = true;
    Problem p = problem(node(64, 32), shapes);
    p.context.read_g_idx = nullptr;
    CHECK(error_message(p) ==
          prefixed("g_idx (input 4) must be read from the device for its range check, but this plan was built from "
                   "tensor descriptors alone. Why: an out-of-range group index would make the dequantization read "
                   "outside scales. How to fix: plan with the tensors themselves (MatMulNBits::plan_tensors or run), or set "
                   "PlanContext::read_g_idx"));
}

TEST_CASE("f32 activations: every tensor must be contiguous, reported in the original's order")
{
    test::Shapes shapes = everything(f32(2));
    shapes.g_idx = true;
    check_reported_in_order(problem(node(64, 32), shapes),
                            {non_contiguous(0, "A"), non_contiguous(1, "B"), non_contiguous(2, "scales"),
                             non_contiguous(3, "zero_points"), non_contiguous(5, "bias"), non_contiguous_output()});
}

TEST_CASE("fp16 activations: dtype checks in the original's order")
{
    check_reported_in_order(
        problem(node(64, 32), f16()),
        {wrong_dtype(1, DataType::Int32, "B must have dtype Uint8, got Int32"),
         wrong_dtype(2, DataType::BFloat16, "scales must have dtype Float16 or Float32 for fp16 activations, got BFloat16"),
         wrong_output_dtype(DataType::Float32, "Y must have dtype Float16, got Float32")});
}

TEST_CASE("fp16 activations: shapes, zero points, bias elements and gamma")
{
    Problem p = problem(node(64, 32), f16());
    p.inputs[0].shape = {2, 65};
    CHECK(error_message(p) == prefixed("A must have rank >= 1 and last dimension K=64, got [2, 65]"));
    p = problem(node(64, 32), f16());
    p.outputs[0].shape = {1, 1, 32};
    CHECK(error_message(p) == prefixed("Y must have shape [1, 32], got [1, 1, 32]"));
    p = problem(node(64, 32, 8), f16());
    p.inputs[1].shape = {32, 2, 16};
    CHECK(error_message(p) == prefixed("B must have shape [32, 2, 32], got [32, 2, 16]"));
    p = problem(node(64, 32), f16());
    p.inputs[2].shape = {2, 32};
    CHECK(error_message(p) == prefixed("scales must have shape [64] or [32, 2], got [2, 32]"));

    p = problem(node(64, 32, 8), everything(f16()));
    p.inputs[3].dtype = DataType::Int32;
    CHECK(error_message(p) == prefixed("zero_points must have dtype Uint8, got Int32"));
    p = problem(node(64, 32, 8), everything(f16()));
    p.inputs[3].shape = {32, 1};
    CHECK(error_message(p) == prefixed("zero_points must have shape [64] or [32, 2], got [32, 1]"));

    p = problem(node(64, 32), everything(f16(3)));
    p.inputs[5].dtype = DataType::Float32;
    CHECK(error_message(p) == prefixed("bias must have dtype Float16, got Float32"));
    p.inputs[5] = desc(DataType::Float16, {1, 2, 32});
    CHECK(error_message(p) ==
          prefixed("bias must have 32 elements (broadcast [N]) or 96 elements (per-token [1, S, N] residual), got "
                   "[1, 2, 32]"));
    p.inputs[5] = desc(DataType::Float16, {1, 3, 32});
    CHECK_NOTHROW(p.plan());

    test::Shapes normed = f16();
    p = problem(rms(node(128, 32)), normed);
    CHECK(error_message(p) == prefixed("rmsnorm_prologue fusion requires the normalization weight at input 6"));
    normed.gamma = DataType::Float16;
    p = problem(rms(node(128, 32)), normed);
    p.inputs[6].dtype = DataType::BFloat16;
    CHECK(error_message(p) == prefixed("gamma must have dtype Float16 or Float, got BFloat16"));
    p = problem(rms(node(128, 32)), normed);
    p.inputs[6].shape = {1, 128};
    CHECK(error_message(p) == prefixed("gamma must have shape [128], got [1, 128]"));
}

TEST_CASE("fp16 activations: contiguity in the original's order, gamma included even without the RMS-norm marker")
{
    test::Shapes shapes = everything(f16(2));
    shapes.gamma = DataType::Float16;
    check_reported_in_order(problem(node(128, 32), shapes),
                            {non_contiguous(0, "A"), non_contiguous(1, "B"), non_contiguous(2, "scales"),
                             non_contiguous(3, "zero_points"), non_contiguous(5, "bias"), non_contiguous(6, "gamma"),
                             non_contiguous_output()});
}

TEST_CASE("fp16 activations do not support g_idx")
{
    test::Shapes shapes = f16();
    shapes.g_idx = true;
    Problem p = problem(node(64, 32), shapes);
    // Neither its dtype nor its contiguity is checked on this path; its presence is the error.
    p.inputs[4] = strided(desc(DataType::Float32, {7}));
    CHECK(error_message(p) ==
          prefixed("MatMulNBits CUDA fp16 activations do not support g_idx. Why: the block-32 fp16 kernels map each "
                   "K block directly to its scale and zero point and do not implement group remapping. How to fix: "
                   "omit g_idx, provide f32 activations, or select another execution provider"));
    CHECK(error_kind(p) == ErrorKind::Unsupported);
}

TEST_CASE("the fused RMS-norm decode GEMVs require fp16 scales")
{
    const std::string message = prefixed(
        "rmsnorm_prologue fusion requires fp16 scales (the fused kernel replicates the fp16 general scales path)");
    test::Shapes shapes = f16();
    shapes.gamma = DataType::Float32;
    shapes.scales = DataType::Float32;
    CHECK(error_message(problem(rms(node(128, 32)), shapes)) == message);
    CHECK(error_message(problem(rms(node(128, 32, 8)), shapes)) == message);
}

TEST_CASE("scalars that do not fit in 32 bits are refused before any launch")
{
    const std::size_t k = std::size_t{1} << 31;
    // K and N are node attributes: refused when the node is built.
    CHECK_THROWS_WITH_AS(MatMulNBitsConfig::from_attributes(node(static_cast<std::int64_t>(k), 1)),
                         prefixed("attribute 'K' must be in 1..2147483647, got 2147483648. Why: the kernels index K "
                                  "and N with 32-bit integers")
                             .c_str(),
                         Error);
    CHECK_THROWS_WITH_AS(MatMulNBitsConfig::from_attributes(node(64, static_cast<std::int64_t>(k))),
                         doctest::Contains("attribute 'N' must be in 1..2147483647"), Error);
    Problem p = problem(node(64, 8), f16(k));
    CHECK(error_message(p) == prefixed("M=2147483648 exceeds the 32-bit int range of the kernel arguments"));
    CHECK(error_kind(p) == ErrorKind::Unsupported);
}

TEST_CASE("gate/up: dtypes, gamma, shapes, layout and paired zero points, in the original's order")
{
    const auto paired = [](test::Shapes shapes = f16()) { return problem(gate_up(node(128, 64)), shapes); };
    check_reported_in_order(paired(),
                            {wrong_dtype(1, DataType::Float32, "W_gate must have dtype Uint8, got Float32"),
                             wrong_dtype(2, DataType::Float32, "scales_gate must have dtype Float16, got Float32"),
                             wrong_dtype(3, DataType::Float32, "W_up must have dtype Uint8, got Float32"),
                             wrong_dtype(4, DataType::Float32, "scales_up must have dtype Float16, got Float32"),
                             wrong_output_dtype(DataType::Float32, "Y must have dtype Float16, got Float32")});

    Problem p = paired();
    p = problem(rms(gate_up(node(128, 64))), f16());
    CHECK(error_message(p) == prefixed("rmsnorm_prologue fusion requires the normalization weight at input 5"));
    test::Shapes normed = f16();
    normed.gamma = DataType::Float16;
    p = problem(rms(gate_up(node(128, 64))), normed);
    p.inputs[5].dtype = DataType::Int8;
    CHECK(error_message(p) == prefixed("gamma must have dtype Float16 or Float, got Int8"));
    p = problem(rms(gate_up(node(128, 64))), normed);
    p.inputs[5].shape = {64};
    CHECK(error_message(p) == prefixed("gamma must have shape [128], got [64]"));
    p = problem(rms(gate_up(node(128, 64))), normed);
    p.inputs[5] = strided(desc(DataType::Float16, {128}));
    CHECK(error_message(p) == prefixed("gamma must be contiguous on the CUDA execution provider"));

    p = paired();
    p.inputs[0].shape = {1, 64};
    CHECK(error_message(p) == prefixed("A must have rank >= 1 and last dimension K=128, got [1, 64]"));
    p = paired();
    p.outputs[0].shape = {1, 128};
    CHECK(error_message(p) == prefixed("Y must have shape [1, 64], got [1, 128]"));
    p = problem(gate_up(node(128, 64, 4, 64)), f16());
    CHECK(error_message(p) ==
          prefixed("gate/up SwiGLU fusion received bits=4 and block_size=64. Why: the fused fp16 path implements "
                   "the block-32 packed int4 layout. How to fix: export 4-bit MatMulNBits weights with block_size=32, "
                   "use KernelPolicy::Fastest, or disable this fusion"));
    // A valid node the original's fused kernels do not implement.
    CHECK(error_kind(p) == ErrorKind::Unsupported);
    p = paired();
    p.inputs[1].shape = {64, 4, 32};
    CHECK(error_message(p) == prefixed("W_gate must have shape [64, 4, 16], got [64, 4, 32]"));
    p = paired();
    p.inputs[3].shape = {64, 4};
    CHECK(error_message(p) == prefixed("W_up must have shape [64, 4, 16], got [64, 4]"));
    p = paired();
    p.inputs[2].shape = {4, 64};
    CHECK(error_message(p) == prefixed("scales_gate must have shape [256] or [64, 4], got [4, 64]"));
    p = paired();
    p.inputs[4].shape = {255};
    CHECK(error_message(p) == prefixed("scales_up must have shape [256] or [64, 4], got [255]"));

    test::Shapes asymmetric = f16();
    asymmetric.zero_points = true;
    p = paired(asymmetric);
    p.inputs[7] = test::absent(DataType::Uint8);
    CHECK(error_message(p) == prefixed("gate/up SwiGLU fusion requires zero points for both projections or neither"));
    p = paired(asymmetric);
    p.inputs[6].dtype = DataType::Int8;
    CHECK(error_message(p) == prefixed("zp_gate must have dtype Uint8, got Int8"));
    p = paired(asymmetric);
    p.inputs[7].shape = {64, 3};
    CHECK(error_message(p) == prefixed("zp_up must have shape [128] or [64, 2], got [64, 3]"));
    p = paired(asymmetric);
    p.inputs[6] = strided(p.inputs[6]);
    CHECK(error_message(p) == prefixed("zp_gate must be contiguous on the CUDA execution provider"));

    check_reported_in_order(problem(gate_up(node(128, 64)), f16(2)),
                            {non_contiguous(0, "A"), non_contiguous(1, "W_gate"), non_contiguous(2, "scales_gate"),
                             non_contiguous(3, "W_up"), non_contiguous(4, "scales_up"), non_contiguous_output()});
}

// --- where nbits checks what the original left to its graph optimizer --------

TEST_CASE("an empty M launches nothing and succeeds on every path")
{
    for (const test::Shapes& shapes : {f16(0), f32(0)}) {
        const LaunchPlan plan = problem(node(128, 64), shapes).plan();
        CHECK(plan.empty());
        CHECK(plan.scratch_bytes.empty());
        CHECK_FALSE(plan.capture_safe);
    }
    test::Shapes batched = f16(0);
    Problem p = problem(node(128, 64), batched);
    p.inputs[0].shape = {3, 0, 128};
    p.outputs[0].shape = {3, 0, 64};
    CHECK(p.plan().variant == "matmul_nbits_f16_empty");
    // Validation still applies to an empty M.
    p.outputs[0].shape = {0, 64};
    CHECK(error_message(p) == prefixed("Y must have shape [3, 0, 64], got [0, 64]"));
}

TEST_CASE("the RMS-norm prologue requires K to be a multiple of 128 on every path")
{
    const std::string message = prefixed(
        "rmsnorm_prologue fusion requires K to be a multiple of 128, got K=96. Why: the fused RMS normalization "
        "reduces each row of A in 128-element chunks (32 lanes x half4) and has no tail, so the last 96 elements of "
        "every row would be left out of the norm. How to fix: fuse only hidden sizes that are multiples of 128, "
        "run SkipSimplifiedLayerNormalization as its own node, or use KernelPolicy::Fastest, whose kernels have no "
        "such limit");
    test::Shapes shapes = f16();
    shapes.gamma = DataType::Float16;
    for (const std::size_t m : {std::size_t{1}, std::size_t{4}}) {
        shapes.m = m;
        CAPTURE(m);
        CHECK(error_message(problem(rms(node(96, 64)), shapes)) == message);
        CHECK(error_message(problem(rms(node(96, 64, 8)), shapes)) == message);
        CHECK(error_message(problem(rms(gate_up(node(96, 64))), shapes)) == message);
    }
    CHECK(error_kind(problem(rms(node(96, 64)), shapes)) == ErrorKind::InvalidArgument);
}

TEST_CASE("the fused RMS-norm decode requires block size 32")
{
    test::Shapes shapes = f16();
    shapes.gamma = DataType::Float16;
    CHECK(error_message(problem(rms(node(128, 64, 4, 64)), shapes)) ==
          prefixed("rmsnorm_prologue fusion at M=1 requires block_size=32, got bits=4 and block_size=64. Why: the "
                   "fused RMS-norm decode GEMVs implement only the block-32 int4 and int8 layouts of B, and would "
                   "misread this one. How to fix: export B with block_size=32, keep "
                   "SkipSimplifiedLayerNormalization as its own node (drop the _cuda_matmul_nbits_rmsnorm_prologue "
                   "marker), or use KernelPolicy::Fastest"));
    CHECK(error_message(problem(rms(node(128, 64, 8, 128)), shapes)).find("got bits=8 and block_size=128") !=
          std::string::npos);
    // Prefill's tiled GEMM handles any block size after the standalone norm.
    shapes.m = 3;
    CHECK(problem(rms(node(128, 64, 4, 64)), shapes).plan().variant == "gemm_f16_tiled_rmsnorm");
}

TEST_CASE("the RMS-norm prologue rejects fp32 scales at M > 1 as it does at M = 1")
{
    test::Shapes shapes = f16(5);
    shapes.gamma = DataType::Float16;
    shapes.scales = DataType::Float32;
    CHECK(error_message(problem(rms(node(128, 64)), shapes)) ==
          prefixed("rmsnorm_prologue fusion requires fp16 scales (the fused kernel replicates the fp16 general "
                   "scales path)"));
    // Without the marker, fp32 scales remain fine at M > 1.
    CHECK(problem(node(128, 64), shapes).plan().variant == "gemm_f16_tiled");
}

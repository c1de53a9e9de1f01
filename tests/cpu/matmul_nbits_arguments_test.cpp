// Kernel arguments: each planned step passes exactly its entry's parameter
// list (checked against the kernel sources), and the scalars the original
// passes for each entry.

#include "matmul_nbits_fixtures.hpp"
#include "kernels.hpp"
#include "ops/plan_internal.hpp"

#include <map>
#include <set>

using namespace nbits;
using namespace nbits::ops;
using test::int_args;
using test::kernel_step;
using test::node;
using test::pointer_args;
using test::problem;

namespace {

enum class Param { Pointer, Int, Float, TensorMap };

// The parameter kinds of `extern "C" __global__ void entry(...)` in a kernel source.
std::vector<Param> parameters_of(const std::string& text, const std::string& entry)
{
    const std::string head = "__global__ void " + entry + "(";
    const std::size_t start = text.find(head);
    REQUIRE_MESSAGE(start != std::string::npos, entry);
    const std::size_t open = start + head.size();
    const std::size_t close = text.find(')', open);
    const std::string list = text.substr(open, close - open);
    std::vector<Param> params;
    std::size_t begin = 0;
    while (begin < list.size()) {
        std::size_t end = list.find(',', begin);
        end = end == std::string::npos ? list.size() : end;
        const std::string param = list.substr(begin, end - begin);
        if (param.find('*') != std::string::npos) {
            params.push_back(Param::Pointer);
        } else if (param.find("TmaMap") != std::string::npos) {
            params.push_back(Param::TensorMap);
        } else if (param.find("float") != std::string::npos) {
            params.push_back(Param::Float);
        } else {
            REQUIRE_MESSAGE(param.find("int") != std::string::npos, param);
            params.push_back(Param::Int);
        }
        begin = end + 1;
    }
    return params;
}

std::vector<Param> kinds_of(const KernelStep& step)
{
    std::vector<Param> kinds;
    for (const KernelArg& arg : step.args) {
        kinds.push_back(std::holds_alternative<BufferRef>(arg)       ? Param::Pointer
                        : std::holds_alternative<std::int32_t>(arg) ? Param::Int
                        : std::holds_alternative<TensorMapArg>(arg) ? Param::TensorMap
                                                                    : Param::Float);
    }
    return kinds;
}

// Plans over a grid of dtypes, layouts, markers (1: RMS norm, 2: gate/up,
// 4: fp32 scales), M and shapes; the invalid combinations are skipped.
std::vector<LaunchPlan> plans_over_many_nodes()
{
    std::vector<LaunchPlan> plans;
    // Tall-skinny at three widths (the 2, 4 and 8-column down entries on H200), wide, and split-K sized.
    const std::vector<std::pair<std::int64_t, std::int64_t>> shapes = {
        {4864, 896}, {16384, 8192}, {32768, 16384}, {896, 4864}, {3072, 8192}};
    for (const DataType activation : {DataType::Float16, DataType::Float32}) {
        for (const std::int64_t bits : {4, 8}) {
            for (const std::int64_t block_size : {32, 64, 128}) {
                for (const std::int64_t accuracy : {0, 4}) {
                    for (const std::size_t m : {std::size_t{0}, std::size_t{1}, std::size_t{5}}) {
                        for (const bool zero_points : {false, true}) {
                            for (const int marker : {0, 1, 2, 3, 4}) {
                                for (const auto& [k, n] : shapes) {
                                    NodeAttributes attributes = node(k, n, bits, block_size, accuracy);
                                    test::Shapes s;
                                    s.activation = activation;
                                    s.m = m;
                                    s.zero_points = zero_points;
                                    if (marker & 1) {
                                        attributes = test::marked(attributes, kRmsNormPrologueAttr);
                                        s.gamma = DataType::Float16;
                                    }
                                    if (marker & 2) {
                                        attributes = test::marked(attributes, kGateUpSwigluAttr);
                                    }
                                    if (marker & 4) {
                                        s.scales = DataType::Float32;
                                    }
                                    try {
                                        plans.push_back(problem(attributes, s).plan());
                                    } catch (const Error&) {
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    return plans;
}

}  // namespace

TEST_CASE("every planned launch passes its entry's parameter list, as declared in kernels_cu")
{
    std::set<std::string> covered;
    for (const LaunchPlan& plan : plans_over_many_nodes()) {
        for (const PlanStep& planned : plan.steps) {
            const auto* step = std::get_if<KernelStep>(&planned);
            if (step == nullptr) {
                continue;
            }
            INFO(plan.variant << ": " << step->entry);
            CHECK(kinds_of(*step) == parameters_of(kernels::source(step->source).text(), step->entry));
            covered.insert(step->entry);
        }
    }
    // The 32 entries of the original plus SiluMul: every one is reached.
    CHECK(covered.size() == 33);
}

TEST_CASE("a step binds arguments by the parameter names of its entry's declaration")
{
    const MatMulNBitsConfig config = MatMulNBitsConfig::from_attributes(node(4096, 4096));
    const std::vector<TensorDesc> inputs = {{DataType::Float16, {1, 4096}, {}, true},
                                            {DataType::Uint8, {4096, 128, 16}, {}, true},
                                            {DataType::Float16, {4096, 128}, {}, true}};
    const std::vector<TensorDesc> outputs = {{DataType::Float16, {1, 4096}, {}, true}};
    PlanContext context;
    context.capabilities = Capabilities::h200();
    const detail::PlanRequest request{config, inputs, outputs, context};
    auto silu = [] {
        detail::StepBuilder step("matmul_nbits_silu_mul_f16", "SiluMul");
        step.arg("a", BufferRef::input(0)).arg("b", BufferRef::input(0)).arg("y", BufferRef::output(0));
        return step;
    };
    LaunchPlan plan;
    // Bound out of order, laid out in the declaration's order.
    detail::StepBuilder ordered("matmul_nbits_silu_mul_f16", "SiluMul");
    ordered.arg("n", std::int32_t{8})
        .arg("y", BufferRef::output(0))
        .arg("b", BufferRef::input(0))
        .arg("a", BufferRef::input(0))
        .block(256)
        .add_to(plan, request);
    CHECK(test::kernel_step(plan, 0).args ==
          std::vector<KernelArg>{BufferRef::input(0), BufferRef::input(0), BufferRef::output(0), std::int32_t{8}});

    auto internal_error = [&](detail::StepBuilder step, const std::string& message) {
        LaunchPlan unused;
        try {
            step.block(256).add_to(unused, request);
            FAIL("no error");
        } catch (const Error& error) {
            CHECK(error.kind() == ErrorKind::Internal);
            CHECK_MESSAGE(std::string(error.what()).find(message) != std::string::npos, error.what());
        }
    };
    internal_error(silu(), "parameter 'n' of matmul_nbits_silu_mul_f16 is not bound");
    CHECK_THROWS_WITH_AS(silu().arg("count", std::int32_t{1}),
                         doctest::Contains("matmul_nbits_silu_mul_f16 declares no parameter 'count'"), Error);
    CHECK_THROWS_WITH_AS(silu().arg("a", BufferRef::input(1)),
                         doctest::Contains("parameter 'a' of matmul_nbits_silu_mul_f16 is bound twice"), Error);
    CHECK_THROWS_WITH_AS(silu().arg("n", 1.0f),
                         doctest::Contains("parameter 'n' of matmul_nbits_silu_mul_f16 is declared an int but bound "
                                           "to a float"),
                         Error);
    CHECK_THROWS_WITH_AS(detail::StepBuilder("matmul_nbits_no_such_entry", "x"),
                         doctest::Contains("no embedded kernel source declares entry 'matmul_nbits_no_such_entry'"),
                         Error);
}

TEST_CASE("a step the device cannot launch is refused when it is planned")
{
    const MatMulNBitsConfig config = MatMulNBitsConfig::from_attributes(node(4096, 4096));
    const std::vector<TensorDesc> inputs = {{DataType::Float16, {1, 4096}, {}, true}};
    const std::vector<TensorDesc> outputs = {{DataType::Float16, {1, 4096}, {}, true}};
    PlanContext context;
    context.capabilities = Capabilities::h200();
    context.capabilities.max_threads_per_block = 128;
    const detail::PlanRequest request{config, inputs, outputs, context};
    auto silu = [] {
        detail::StepBuilder step("matmul_nbits_silu_mul_f16", "SiluMul");
        step.arg("a", BufferRef::input(0)).arg("b", BufferRef::input(0)).arg("y", BufferRef::output(0));
        step.arg("n", std::int32_t{8});
        return step;
    };
    LaunchPlan plan;
    CHECK_THROWS_WITH_AS(silu().block(256).add_to(plan, request),
                         doctest::Contains("SiluMul needs 256 threads per block, but NVIDIA H200 allows at most 128"),
                         Error);
    CHECK_THROWS_WITH_AS(silu().block(128).grid(1, 65536).add_to(plan, request),
                         doctest::Contains("outside CUDA's launch limits"), Error);
    CHECK_THROWS_WITH_AS(silu().block(128).shared_memory(228 * 1024, true).add_to(plan, request),
                         doctest::Contains("needs 233472 bytes of dynamic shared memory, but NVIDIA H200 allows at "
                                           "most 232448"),
                         Error);
    CHECK(plan.steps.empty());
}

TEST_CASE("kernel declarations carry their parameters and alignment comments")
{
    const jit::KernelEntry* down = kernels::source("gemv_f16").entry("matmul_nbits_gemv_f16_scales_f16_down");
    REQUIRE(down != nullptr);
    REQUIRE(down->parameters.size() == 14);
    CHECK(down->parameters[0].name == "activation");
    CHECK(down->parameters[0].kind == jit::KernelParameter::Kind::Pointer);
    REQUIRE(down->parameters[0].alignment.size() == 1);
    CHECK(down->parameters[0].alignment[0].bytes == 16);
    CHECK(down->parameters[0].alignment[0].when.empty());
    CHECK(down->parameters[6].name == "k");
    CHECK(down->parameters[6].kind == jit::KernelParameter::Kind::Int32);
    const jit::KernelEntry* general = kernels::source("gemv_f16").entry("matmul_nbits_gemv_f16_general_bs");
    REQUIRE(general != nullptr);
    REQUIRE(general->parameters[1].alignment.size() == 1);
    CHECK(general->parameters[1].alignment[0].bytes == 4);
    CHECK(general->parameters[1].alignment[0].when == "int4");

    const std::vector<jit::KernelEntry> parsed = jit::declared_entries(
        "extern \"C\" __global__ void __launch_bounds__(256) f(const float* x,  // align 8; align 16 when K%8==0\n"
        "    /* (a comment with parentheses) */ int n, float e)\n{}\n"
        "extern \"C\" __global__ void g(void* p) {}\n"
        // An attribute macro without arguments between the bounds and the name (an empty one when not split).
        "extern \"C\" __global__ void __launch_bounds__(128, 2) NBITS_CLUSTER h(int m)\n{}\n"
        "extern \"C\" __global__ void ATTRIBUTE\n    k(int m) {}\n");
    REQUIRE(parsed.size() == 4);
    CHECK(parsed[2].name == "h");
    CHECK(parsed[3].name == "k");
    CHECK(parsed[3].parameters.size() == 1);
    CHECK(parsed[0].name == "f");
    REQUIRE(parsed[0].parameters.size() == 3);
    REQUIRE(parsed[0].parameters[0].alignment.size() == 2);
    CHECK(parsed[0].parameters[0].alignment[0].bytes == 8);
    CHECK(parsed[0].parameters[0].alignment[1].bytes == 16);
    CHECK(parsed[0].parameters[0].alignment[1].when == "K%8==0");
    CHECK(parsed[0].parameters[1].name == "n");
    CHECK(parsed[0].parameters[1].alignment.empty());
    CHECK(parsed[0].parameters[2].kind == jit::KernelParameter::Kind::Float32);
    CHECK(parsed[1].parameters.size() == 1);
}

TEST_CASE("the general-block-size fp16 GEMV takes the trailing bits, the tuned block-32 ones do not")
{
    const KernelStep general = kernel_step(problem(node(4096, 4096, 4, 128)).plan(), 0);
    CHECK(general.entry == "matmul_nbits_gemv_f16_general_bs");
    CHECK(int_args(general) == std::vector<std::int32_t>{4096, 4096, 128, 32, 64, 16, 1, 0, 4});
    const KernelStep int8 = kernel_step(problem(node(896, 896, 8, 64)).plan(), 0);
    CHECK(int_args(int8) == std::vector<std::int32_t>{896, 896, 64, 14, 64, 14, 1, 0, 8});
    const KernelStep tuned = kernel_step(problem(node(896, 4864)).plan(), 0);
    CHECK(int_args(tuned) == std::vector<std::int32_t>{896, 4864, 32, 28, 16, 14, 1, 0});
    CHECK(pointer_args(tuned) == std::vector<BufferRef>{BufferRef::input(0), BufferRef::input(1),
                                                        BufferRef::input(2), BufferRef::null(), BufferRef::null(),
                                                        BufferRef::output(0)});
}

TEST_CASE("the general-block-size GEMM takes block_size and blob_size, the block-32 GEMM does not")
{
    test::Shapes prefill;
    prefill.m = 40;
    const KernelStep general = kernel_step(problem(node(896, 4864, 4, 128), prefill).plan(), 0);
    CHECK(int_args(general) == std::vector<std::int32_t>{40, 896, 4864, 7, 4, 1, 0, 0, 128, 64});
    const KernelStep block32 = kernel_step(problem(node(896, 4864, 8, 32), prefill).plan(), 0);
    CHECK(block32.args.size() == 14);
    CHECK(int_args(block32) == std::vector<std::int32_t>{40, 896, 4864, 28, 8, 1, 0, 0});
}

TEST_CASE("bias_post_round is set only for a folded bias that is present")
{
    test::Shapes biased;
    biased.bias = true;
    const auto post_round = [](const LaunchPlan& plan) { return int_args(kernel_step(plan, 0)).back(); };
    CHECK(post_round(problem(test::marked(node(896, 4864), kFoldedBiasAttr), biased).plan()) == 1);
    CHECK(post_round(problem(test::marked(node(896, 4864), kFoldedBiasAttr)).plan()) == 0);
    CHECK(post_round(problem(node(896, 4864), biased).plan()) == 0);
    CHECK(pointer_args(kernel_step(problem(node(896, 4864), biased).plan(), 0))[4] == BufferRef::input(5));
    // The int8 decode GEMV ends with (scales_fp16, bias_post_round).
    biased.scales = DataType::Float32;
    const KernelStep int8 = kernel_step(problem(test::marked(node(3072, 3072, 8), kFoldedBiasAttr), biased).plan(), 0);
    CHECK(int_args(int8) == std::vector<std::int32_t>{3072, 3072, 96, 0, 1});
}

TEST_CASE("a per-token residual in the bias slot is indexed with row stride N at prefill, a broadcast bias with 0")
{
    test::Shapes prefill;
    prefill.m = 6;
    prefill.bias = true;
    test::Problem p = problem(node(896, 4864), prefill);
    CHECK(int_args(kernel_step(p.plan(), 0))[7] == 0);
    p.inputs[5] = test::desc(DataType::Float16, {1, 6, 4864});
    CHECK(int_args(kernel_step(p.plan(), 0))[7] == 4864);
    // A residual at M == 1 is a broadcast bias: the decode GEMV has no stride.
    prefill.m = 1;
    p = problem(node(896, 4864), prefill);
    p.inputs[5] = test::desc(DataType::Float16, {1, 1, 4864});
    CHECK(kernel_step(p.plan(), 0).args.size() == 14);
}

TEST_CASE("the RMS-norm launches pass gamma's dtype flag and the node's epsilon as a float")
{
    NodeAttributes attributes = test::marked(node(896, 1152), kRmsNormPrologueAttr);
    attributes.set(kRmsNormEpsilonAttr, 1e-6f);
    test::Shapes shapes;
    shapes.gamma = DataType::Float32;
    const KernelStep decode = kernel_step(problem(attributes, shapes).plan(), 0);
    CHECK(pointer_args(decode)[4] == BufferRef::input(6));
    CHECK(int_args(decode) == std::vector<std::int32_t>{896, 1152, 28, 16, 14, 0, 0});
    CHECK(std::get<float>(decode.args.back()) == 1e-6f);

    shapes.m = 3;
    const LaunchPlan prefill = problem(attributes, shapes).plan();
    const KernelStep norm = kernel_step(prefill, 0);
    CHECK(pointer_args(norm) ==
          std::vector<BufferRef>{BufferRef::input(0), BufferRef::input(6), BufferRef::scratch(0)});
    CHECK(int_args(norm) == std::vector<std::int32_t>{896, 3, 0});
    CHECK(std::get<float>(norm.args.back()) == 1e-6f);
    // The GEMM reads the normalized rows, with "scales are fp16".
    const KernelStep gemm = kernel_step(prefill, 1);
    CHECK(pointer_args(gemm)[0] == BufferRef::scratch(0));
    CHECK(int_args(gemm)[5] == 1);
}

TEST_CASE("accuracy-4 kernels address the persistent workspace at 0 and padded K")
{
    test::Shapes shapes;
    shapes.activation = DataType::Float32;
    const LaunchPlan plan = problem(node(4001, 64, 4, 32, 4), shapes).plan();
    const KernelStep quantize = kernel_step(plan, 0);
    CHECK(pointer_args(quantize) ==
          std::vector<BufferRef>{BufferRef::input(0), BufferRef::workspace(0), BufferRef::workspace(4032)});
    CHECK(int_args(quantize) == std::vector<std::int32_t>{4001, 4032});
    CHECK(quantize.config.grid.x == 126);
    const KernelStep gemv = kernel_step(plan, 1);
    CHECK(pointer_args(gemv)[0] == BufferRef::workspace(0));
    CHECK(pointer_args(gemv)[1] == BufferRef::workspace(4032));
    CHECK(int_args(gemv) == std::vector<std::int32_t>{4001, 64, 126});

    shapes.zero_points = true;
    const LaunchPlan blockwise = problem(node(4001, 64, 4, 32, 4), shapes).plan();
    CHECK(int_args(kernel_step(blockwise, 0)) == std::vector<std::int32_t>{4001, 32, 4032});
    CHECK(int_args(kernel_step(blockwise, 1)) == std::vector<std::int32_t>{4001, 64, 126, 32, 16, 63});
    CHECK(pointer_args(kernel_step(blockwise, 1))[4] == BufferRef::input(3));
}

TEST_CASE("the dequant kernel reads g_idx and writes the fp32 weight scratch")
{
    test::Shapes shapes;
    shapes.activation = DataType::Float32;
    shapes.m = 2;
    shapes.g_idx = true;
    shapes.zero_points = true;
    const KernelStep dequant = kernel_step(problem(node(4096, 1024, 8, 64), shapes).plan(), 0);
    CHECK(pointer_args(dequant) == std::vector<BufferRef>{BufferRef::input(1), BufferRef::input(2),
                                                          BufferRef::input(3), BufferRef::input(4),
                                                          BufferRef::scratch(0)});
    CHECK(int_args(dequant) == std::vector<std::int32_t>{4096, 1024, 64, 64, 64, 64, 8});
    CHECK(dequant.config.grid.x == 16384);
}

TEST_CASE("f32 decode GEMVs pass the fixed-layout or the block-general scalars")
{
    test::Shapes shapes;
    shapes.activation = DataType::Float32;
    shapes.zero_points = true;
    CHECK(int_args(kernel_step(problem(node(4096, 1024, 4, 128), shapes).plan(), 0)) ==
          std::vector<std::int32_t>{4096, 1024, 32});
    CHECK(int_args(kernel_step(problem(node(4096, 1024, 4, 64), shapes).plan(), 0)) ==
          std::vector<std::int32_t>{4096, 1024, 64, 64, 32, 32, 4});
    shapes.m = 3;
    CHECK(int_args(kernel_step(problem(node(4096, 1024, 4, 32, 4), shapes).plan(), 0)) ==
          std::vector<std::int32_t>{3, 4096, 1024, 32, 128, 16, 64});
}

TEST_CASE("gate/up launches: paired pointers, block-32 scalars, and SiluMul over Y in place")
{
    test::Shapes shapes;
    shapes.zero_points = true;
    const KernelStep decode =
        kernel_step(problem(test::marked(node(896, 4864), kGateUpSwigluAttr), shapes).plan(), 0);
    CHECK(pointer_args(decode) == std::vector<BufferRef>{BufferRef::input(0), BufferRef::input(1),
                                                         BufferRef::input(2), BufferRef::input(3),
                                                         BufferRef::input(4), BufferRef::input(6),
                                                         BufferRef::input(7), BufferRef::output(0)});
    CHECK(int_args(decode) == std::vector<std::int32_t>{896, 4864, 28, 16, 14});

    shapes.m = 3;
    const LaunchPlan prefill = problem(test::marked(node(896, 4864), kGateUpSwigluAttr), shapes).plan();
    CHECK(pointer_args(kernel_step(prefill, 0)) ==
          std::vector<BufferRef>{BufferRef::input(0), BufferRef::input(1), BufferRef::input(2), BufferRef::input(6),
                                 BufferRef::null(), BufferRef::scratch(0)});
    CHECK(pointer_args(kernel_step(prefill, 1)) ==
          std::vector<BufferRef>{BufferRef::input(0), BufferRef::input(3), BufferRef::input(4), BufferRef::input(7),
                                 BufferRef::null(), BufferRef::output(0)});
    const KernelStep silu = kernel_step(prefill, 2);
    CHECK(pointer_args(silu) == std::vector<BufferRef>{BufferRef::scratch(0), BufferRef::output(0),
                                                       BufferRef::output(0)});
    CHECK(int_args(silu) == std::vector<std::int32_t>{3 * 4864});
    CHECK(silu.config.grid.x == 29);
}

TEST_CASE("SiluMul grids cover half2 pairs, at least one CTA and at most 65535")
{
    const auto silu_grid = [](std::size_t m, std::int64_t n) {
        test::Shapes shapes;
        shapes.m = m;
        const LaunchPlan plan = problem(test::marked(node(128, n), kGateUpSwigluAttr), shapes).plan();
        return kernel_step(plan, 2).config.grid.x;
    };
    CHECK(silu_grid(2, 1) == 1);
    CHECK(silu_grid(2, 256) == 1);
    CHECK(silu_grid(2, 257) == 2);
    CHECK(silu_grid(3, 1000) == 6);
    CHECK(silu_grid(65536, 1024) == 65535);
}

TEST_CASE("vector loads and element types set the alignment the executor checks")
{
    const LaunchPlan down = problem(node(4864, 896)).plan();
    CHECK(kernel_step(down, 0).alignment ==
          std::vector<AlignmentRequirement>{{BufferRef::input(0), 16, "A (input 0)"},
                                            {BufferRef::input(1), 16, "B (input 1)"},
                                            {BufferRef::input(2), 2, "scales (input 2)"},
                                            {BufferRef::output(0), 2, "Y (output 0)"}});
    const LaunchPlan int8 = problem(node(3072, 3072, 8)).plan();
    CHECK(kernel_step(int8, 0).alignment[1] == AlignmentRequirement{BufferRef::input(1), 8, "B (input 1)"});
    // int8 weights in the general-block-size GEMV are read byte by byte.
    const LaunchPlan general_int8 = problem(node(896, 896, 8, 64)).plan();
    CHECK(kernel_step(general_int8, 0).alignment[0] == AlignmentRequirement{BufferRef::input(0), 2, "A (input 0)"});
    CHECK(kernel_step(general_int8, 0).alignment[1] ==
          AlignmentRequirement{BufferRef::input(2), 2, "scales (input 2)"});

    test::Shapes shapes;
    shapes.gamma = DataType::Float32;
    shapes.m = 2;
    const LaunchPlan norm = problem(test::marked(node(128, 64), kRmsNormPrologueAttr), shapes).plan();
    CHECK(kernel_step(norm, 0).alignment ==
          std::vector<AlignmentRequirement>{{BufferRef::input(0), 8, "A (input 0)"},
                                            {BufferRef::input(6), 4, "gamma (input 6)"}});
    const LaunchPlan gate_up = problem(test::marked(node(128, 64), kGateUpSwigluAttr)).plan();
    CHECK(kernel_step(gate_up, 0).alignment[1] == AlignmentRequirement{BufferRef::input(1), 4, "W_gate (input 1)"});
}

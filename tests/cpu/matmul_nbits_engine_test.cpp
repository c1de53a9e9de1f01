// What an engine relies on besides the kernels: plans cached by tensor
// signature, the kernel policy, the workspace a run needs, and overrides read
// once.

#include "matmul_nbits_fixtures.hpp"

#include "ops/plan_cache.hpp"

#include <cstdlib>

using namespace nbits;
using namespace nbits::ops;
using test::node;
using test::problem;

namespace {

std::shared_ptr<const LaunchPlan> planned(const test::Problem& p) { return std::make_shared<const LaunchPlan>(p.plan()); }

}  // namespace

TEST_CASE("the plan cache hits on the same signature and misses on any change of it")
{
    detail::PlanCache cache;
    test::Problem p = problem(node(4096, 4096));
    CHECK(cache.find(p.inputs, p.outputs) == nullptr);
    const detail::PlanCache::Entry& entry = cache.insert(p.inputs, p.outputs, planned(p), {});
    CHECK(cache.find(p.inputs, p.outputs) == &entry);
    CHECK(cache.stats().hits == 1);
    CHECK(cache.stats().misses == 1);
    CHECK(cache.stats().entries == 1);

    // Device tensors with the same descriptors hit the same entry: addresses are not planned.
    std::vector<Tensor> inputs;
    for (const TensorDesc& d : p.inputs) {
        Tensor t;
        static_cast<TensorDesc&>(t) = d;
        t.data = 0x1000;
        inputs.push_back(t);
    }
    std::vector<Tensor> outputs(1);
    static_cast<TensorDesc&>(outputs[0]) = p.outputs[0];
    CHECK(cache.find(inputs, outputs) == &entry);

    auto miss = [&](const test::Problem& changed, const char* what) {
        INFO(what);
        CHECK(cache.find(changed.inputs, changed.outputs) == nullptr);
    };
    test::Problem m2 = p;
    m2.inputs[0].shape = {2, 4096};
    m2.outputs[0].shape = {2, 4096};
    miss(m2, "M");
    test::Problem rank = p;
    rank.inputs[0].shape = {1, 1, 4096};
    rank.outputs[0].shape = {1, 1, 4096};
    miss(rank, "rank");
    test::Problem dtype = p;
    dtype.inputs[2].dtype = DataType::Float32;
    miss(dtype, "scales dtype");
    test::Problem strided = p;
    strided.inputs[0].strides = {4096, 1};
    miss(strided, "explicit strides");
    test::Problem present = p;
    present.inputs[5] = test::desc(DataType::Float16, {4096});
    miss(present, "a bias present");
    test::Problem fewer = p;
    fewer.inputs.resize(3);
    miss(fewer, "fewer inputs");
    CHECK(cache.stats().misses == 7);
    CHECK(cache.stats().hits == 2);
}

TEST_CASE("the plan cache keeps the newest plans and forgets everything on clear")
{
    detail::PlanCache cache;
    auto with_m = [](std::size_t m) {
        test::Shapes shapes;
        shapes.m = m;
        return problem(node(256, 256), shapes);
    };
    for (std::size_t m = 1; m <= detail::PlanCache::kCapacity + 2; ++m) {
        const test::Problem p = with_m(m);
        cache.insert(p.inputs, p.outputs, planned(p), {});
    }
    CHECK(cache.stats().entries == detail::PlanCache::kCapacity);
    const test::Problem oldest = with_m(1);
    const test::Problem newest = with_m(detail::PlanCache::kCapacity + 2);
    CHECK(cache.find(oldest.inputs, oldest.outputs) == nullptr);
    const detail::PlanCache::Entry* hit = cache.find(newest.inputs, newest.outputs);
    REQUIRE(hit != nullptr);
    CHECK(hit->plan->steps.size() == 1);
    cache.clear();
    CHECK(cache.stats().entries == 0);
    CHECK(cache.find(newest.inputs, newest.outputs) == nullptr);
}

TEST_CASE("KernelPolicy spells and parses as 'original' and 'fastest'")
{
    CHECK(std::string(to_string(KernelPolicy::Original)) == "original");
    CHECK(std::string(to_string(KernelPolicy::Fastest)) == "fastest");
    CHECK(parse_kernel_policy("fastest") == KernelPolicy::Fastest);
    CHECK(parse_kernel_policy("original") == KernelPolicy::Original);
    CHECK_FALSE(parse_kernel_policy("Fastest").has_value());
    CHECK(MatMulNBitsOptions{}.policy == KernelPolicy::Original);
}

TEST_CASE("JitImage spells and parses as 'ptx' and 'cubin', PTX by default")
{
    CHECK(std::string(to_string(JitImage::Ptx)) == "ptx");
    CHECK(std::string(to_string(JitImage::Cubin)) == "cubin");
    CHECK(parse_jit_image("ptx") == JitImage::Ptx);
    CHECK(parse_jit_image("cubin") == JitImage::Cubin);
    CHECK_FALSE(parse_jit_image("CUBIN").has_value());
    CHECK_FALSE(parse_jit_image("sm_90").has_value());
    CHECK(RuntimeOptions{}.jit_image == JitImage::Ptx);
}

TEST_CASE("plans carry their policy, and validation is the same under both")
{
    test::Problem p = problem(node(4096, 4096));
    CHECK(p.plan().policy == KernelPolicy::Original);
    p.context.policy = KernelPolicy::Fastest;
    CHECK(p.plan().policy == KernelPolicy::Fastest);
    CHECK(p.plan().describe().rfind("policy: fastest\n", 0) == 0);

    test::Problem broken = problem(node(4096, 4096));
    broken.inputs[1].shape = {4096, 128, 8};
    const std::string original = test::error_message(broken);
    broken.context.policy = KernelPolicy::Fastest;
    CHECK(test::error_message(broken) == original);
    CHECK(original.find("B must have shape [4096, 128, 16]") != std::string::npos);
}

TEST_CASE("a bf16 node keeps the original's error under KernelPolicy::Original")
{
    test::Shapes shapes;
    shapes.activation = DataType::BFloat16;
    test::Problem p = problem(node(4096, 4096), shapes);
    CHECK(test::error_message(p) == test::prefixed("A must have dtype Float32, got BFloat16"));
}

TEST_CASE("the workspace a run needs is the plan's scratch, each buffer 256-byte aligned")
{
    test::Shapes shapes;
    shapes.m = 7;
    shapes.gamma = DataType::Float16;
    const LaunchPlan plan = problem(test::marked(test::marked(node(896, 4864), kRmsNormPrologueAttr),
                                                 kGateUpSwigluAttr),
                                    shapes)
                                .plan();
    REQUIRE(plan.scratch_bytes == std::vector<std::size_t>{7 * 896 * 2, 7 * 4864 * 2});
    CHECK(plan.scratch_offset(0) == 0);
    CHECK(plan.scratch_offset(1) == 12544);  // 12544 is a multiple of 256
    CHECK(plan.workspace_bytes() == 12544 + 68096);
    CHECK(problem(node(896, 4864)).plan().workspace_bytes() == 0);
}

TEST_CASE("NBITS_DOWN_COLS wins over its ONNX_GENAI_DOWN_COLS alias, which still counts alone")
{
    ::setenv("ONNX_GENAI_DOWN_COLS", "4", 1);
    ::unsetenv("NBITS_DOWN_COLS");
    CHECK(PlanOverrides::from_environment().down_columns == 4);
    ::setenv("NBITS_DOWN_COLS", "8", 1);
    CHECK(PlanOverrides::from_environment().down_columns == 8);
    ::setenv("NBITS_ACC4_WARPS", "2", 1);
    CHECK(PlanOverrides::from_environment().accuracy4_warps == 2);
    ::unsetenv("NBITS_DOWN_COLS");
    ::unsetenv("ONNX_GENAI_DOWN_COLS");
    ::unsetenv("NBITS_ACC4_WARPS");
    CHECK_FALSE(PlanOverrides::from_environment().down_columns.has_value());
}

// Refused inputs say why, leave nothing allocated and launch nothing; empty
// batches launch nothing and succeed; the persistent workspace goes with its
// operator.

#include "matmul_fixture.hpp"

#include <doctest/doctest.h>

using namespace nbits;
using namespace nbits::test;

namespace {

// A case's random inputs with some slots changed, refused with `message`.
void check_refused(const OperatorCase& spec, const std::function<void(std::vector<HostTensor>&)>& edit,
                   const std::string& message)
{
    CAPTURE(spec.name);
    CudaRuntime& runtime = matmul_gpu();
    std::vector<HostTensor> hosts = spec.random_inputs(0xe770ull);
    edit(hosts);
    const DeviceTensors inputs(runtime, hosts);
    ops::MatMulNBits op(matmul_gpu_shared(), spec.attributes());
    DeviceOutput output(runtime, spec.activation, {spec.m, spec.n});
    expect_refused(op, inputs.tensors(), output, message);
}

void keep(std::vector<HostTensor>&) {}

// g_idx (slot 4) of the f32 g_idx case: every group valid but one.
std::function<void(std::vector<HostTensor>&)> g_idx_with(std::size_t index, std::int32_t group)
{
    return [index, group](std::vector<HostTensor>& hosts) {
        const std::size_t k = hosts[4].shape[0];
        std::vector<std::int32_t> groups(k);
        for (std::size_t depth = 0; depth < k; ++depth) {
            groups[depth] = static_cast<std::int32_t>(depth / 32);
        }
        groups[index] = group;
        hosts[4] = HostTensor::i32({k}, groups);
    };
}

}  // namespace

TEST_CASE("scales of the wrong dtype are refused with the original message")
{
    check_refused(OperatorCase::f32("f32 decode with fp16 scales", 1, 256, 48),
                  [](std::vector<HostTensor>& hosts) {
                      hosts[2] = HostTensor::real(DataType::Float16, hosts[2].shape, std::vector<float>(48 * 8, 0.02f));
                  },
                  "cuda_ep MatMulNBits: scales must have dtype Float32, got Float16");
}

TEST_CASE("an out-of-range g_idx is refused with the original message")
{
    const OperatorCase spec = OperatorCase::f32("f32 decode with g_idx", 1, 256, 48).with_g_idx();
    check_refused(spec, g_idx_with(5, 8), "cuda_ep MatMulNBits: g_idx[5]=8 is outside 0..8");
    check_refused(spec, g_idx_with(0, -1), "cuda_ep MatMulNBits: g_idx[0]=-1 is outside 0..8");
}

TEST_CASE("an RMS-norm prologue without gamma is refused with the original message")
{
    check_refused(OperatorCase::f16("fp16 RMS-norm decode without gamma", 1, 1024, 77).rmsnorm(DataType::Float16),
                  [](std::vector<HostTensor>& hosts) { hosts.resize(3); },
                  "cuda_ep MatMulNBits: rmsnorm_prologue fusion requires the normalization weight at input 6");
}

TEST_CASE("an RMS-norm prologue staging more than the opt-in shared memory is refused before any launch")
{
    // K = 131072 stages 256 KiB of fp16 activation; an H200 opts into 227 KiB.
    check_refused(OperatorCase::f16("fp16 RMS-norm decode at K=131072", 1, 131072, 8).rmsnorm(DataType::Float16),
                  keep, "");
}

TEST_CASE("inputs the original silently miscomputed are refused")
{
    SUBCASE("an RMS-norm prologue with K not a multiple of 128")
    {
        check_refused(OperatorCase::f16("fp16 RMS-norm decode at K=1000", 1, 1000, 77).rmsnorm(DataType::Float16),
                      keep, "");
    }
    SUBCASE("an int4 RMS-norm prologue decode at block size 64")
    {
        check_refused(
            OperatorCase::f16("fp16 RMS-norm decode at block 64", 1, 1024, 77).block(64).rmsnorm(DataType::Float16),
            keep, "");
    }
    SUBCASE("an RMS-norm prologue prefill with fp32 scales")
    {
        check_refused(
            OperatorCase::f16("fp16 RMS-norm prefill, fp32 scales", 5, 1024, 77).fp32_scales().rmsnorm(DataType::Float16),
            keep, "cuda_ep MatMulNBits: rmsnorm_prologue fusion requires fp16 scales");
    }
}

TEST_CASE("a gate/up pair with zero points for one projection only is refused with the original message")
{
    check_refused(OperatorCase::f16("gate/up decode with one zero-point tensor", 1, 896, 77)
                      .paired_gate_up()
                      .with_zero_points(),
                  [](std::vector<HostTensor>& hosts) { hosts[7] = HostTensor::absent(DataType::Uint8); },
                  "cuda_ep MatMulNBits: gate/up SwiGLU fusion requires zero points for both projections or neither");
}

TEST_CASE("an empty batch launches nothing, succeeds and leaves the output memory untouched")
{
    const OperatorCase cases[] = {
        OperatorCase::f16("fp16 decode of M=0", 0, 1024, 77),
        OperatorCase::f32("f32 GEMM of M=0", 0, 1024, 77),
        OperatorCase::f16("gate/up of M=0", 0, 896, 77).paired_gate_up(),
    };
    CudaRuntime& runtime = matmul_gpu();
    for (const OperatorCase& spec : cases) {
        CAPTURE(spec.name);
        const DeviceTensors inputs(runtime, spec.random_inputs(0x0e1ull));
        ops::MatMulNBits op(matmul_gpu_shared(), spec.attributes());
        // N elements of memory behind the [0, N] output: what the original
        // wrote out of bounds.
        DeviceOutput output(runtime, spec.activation, {0, spec.n}, spec.n * element_size(spec.activation));
        const RunOutcome outcome = run_into(op, inputs.tensors(), output);
        CHECK(kernel_entries(outcome.plan).empty());
        CHECK_FALSE(has_gemm_step(outcome.plan));
        CHECK(output.still_poisoned());
    }
}

TEST_CASE("the accuracy-level-4 workspace lives and dies with its operator")
{
    CudaRuntime& runtime = matmul_gpu();
    const std::uint64_t before = runtime.counters().live();
    {
        ops::MatMulNBits op(matmul_gpu_shared(), matmul_attributes(1000, 77, 4, 32, 4));
        CHECK(runtime.counters().live() > before);
    }
    CHECK(runtime.counters().live() == before);
}

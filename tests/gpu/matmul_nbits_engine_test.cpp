// An operator inside an engine: it runs on the caller's stream, takes scratch
// from the caller's workspace or nbits' stream-ordered pool, reuses its plans,
// and is safe to call from many threads.

#include "matmul_fixture.hpp"

#include "cuda/driver.hpp"
#include "nbits/error.hpp"
#include "runtime/internals.hpp"

#include <doctest/doctest.h>

using namespace nbits;
using namespace nbits::test;

namespace {

// Holds a stream for ~0.1 s, so work queued behind it that does not wait for
// it runs first and reads stale data.
const jit::KernelSource& spin_source()
{
    static const jit::KernelSource source("engine_spin", R"(
extern "C" __global__ void spin(const long long cycles)
{
    const long long start = clock64();
    while (clock64() - start < cycles) {
    }
}
)");
    return source;
}

void spin(CudaRuntime& runtime, CUstream stream)
{
    KernelArgs args;
    args.i64(200'000'000);
    runtime.internals().launch(runtime.internals().function(spin_source(), "spin"), LaunchConfig{}, args, stream,
                               "spin");
}

void copy_async(CudaRuntime& runtime, CUdeviceptr destination, CUdeviceptr source, std::size_t bytes, CUstream stream)
{
    CudaRuntime::Internals::ScopedContext scope(runtime);
    cuda::check(cuda::driver().memcpy_dtod_async(destination, source, bytes, stream), "queueing a copy");
}

// The bytes a plain run on the runtime's stream writes.
std::vector<std::uint8_t> reference_bytes(PreparedCase& prepared)
{
    return prepared.run().bytes;
}

const OperatorCase& case_named(const std::string& name)
{
    for (const OperatorCase& spec : operator_cases()) {
        if (spec.name == name) {
            return spec;
        }
    }
    FAIL("no operator case named " << name);
    throw std::logic_error("unreachable");
}

}  // namespace

TEST_CASE("a run on the caller's stream waits for its producer and is waited for by its consumer")
{
    CudaRuntime& runtime = matmul_gpu();
    // Decode, prefill with scratch, and the dequantize + cuBLASLt path.
    for (const char* name : {"fp16 int4 zero-point decode on 64 threads", "fp16 int4 zero-point RMS-norm prologue prefill, fp32 gamma", "f32 int8 prefill through dequantization and cuBLASLt"}) {
        CAPTURE(name);
        const OperatorCase& spec = case_named(name);
        PreparedCase prepared(spec, 0x5eed);
        const std::vector<std::uint8_t> expected = reference_bytes(prepared);

        // A arrives on the caller's stream only after the spin: a run ordered
        // anywhere else reads the zeros that stand in it until then.
        const Tensor& a = prepared.inputs()[0];
        DeviceBuffer staged(runtime, a.byte_size());
        copy_async(runtime, staged.get(), a.data, a.byte_size(), runtime.stream());
        runtime.memset_async(a.data, 0, a.byte_size());
        runtime.synchronize();

        CallerStream caller(runtime);
        DeviceOutput& output = prepared.output();
        output.poison();
        DeviceBuffer consumed = poisoned(runtime, output.bytes().size());
        spin(runtime, caller.get());
        copy_async(runtime, a.data, staged.get(), a.byte_size(), caller.get());
        RunOptions options;
        options.stream = caller.get();
        prepared.op().run(prepared.inputs(), {output.tensor()}, options);
        copy_async(runtime, consumed.get(), output.tensor().data, expected.size(), caller.get());
        caller.synchronize();
        const std::vector<std::uint8_t> got = download<std::uint8_t>(runtime, consumed);
        const std::string difference = byte_difference(got, expected, element_size(spec.activation));
        CHECK_MESSAGE(difference.empty(), difference);
    }
}

TEST_CASE("a stream of another context is refused before anything is enqueued")
{
    const OperatorCase& spec = case_named("fp16 int4 zero-point decode on 64 threads");
    PreparedCase prepared(spec, 1);
    const cuda::Driver& d = cuda::driver();
    CUdevice device = 0;
    cuda::check(d.device_get(&device, matmul_gpu().device()), "opening the device");
    CUcontext other = nullptr;
    cuda::check(d.ctx_create(&other, nullptr, 0, device), "creating a second context");
    CUstream foreign = nullptr;
    const CUresult created = d.stream_create(&foreign, CU_STREAM_NON_BLOCKING);
    CUcontext popped = nullptr;
    d.ctx_pop_current(&popped);
    REQUIRE(created == CUDA_SUCCESS);

    RunOptions options;
    options.stream = foreign;
    DeviceOutput& output = prepared.output();
    output.poison();
    CHECK_THROWS_WITH_AS(prepared.op().run(prepared.inputs(), {output.tensor()}, options),
                         doctest::Contains("is not a stream of device"), Error);
    CHECK(output.still_poisoned());
    d.ctx_push_current(other);
    d.stream_destroy(foreign);
    d.ctx_pop_current(&popped);
    d.ctx_destroy(other);
}

TEST_CASE("scratch comes from the caller's workspace when one is passed, else from the pool, never synchronously")
{
    CudaRuntime& runtime = matmul_gpu();
    for (const char* name : {"fp16 int4 zero-point RMS-norm prologue prefill, fp32 gamma", "paired gate/up SwiGLU RMS-norm prefill, fp32 gamma", "f32 int8 prefill through dequantization and cuBLASLt"}) {
        CAPTURE(name);
        const OperatorCase& spec = case_named(name);
        PreparedCase prepared(spec, 0x3a11);
        const std::vector<TensorDesc> input_descs(prepared.inputs().begin(), prepared.inputs().end());
        const std::size_t needed = prepared.op().workspace_bytes(input_descs, {prepared.output().tensor()});
        REQUIRE(needed > 0);

        // The pool: one stream-ordered allocation and its release per run.
        AllocationCounters before = runtime.counters();
        const RunOutcome pooled = prepared.run();
        AllocationCounters after = runtime.counters();
        CHECK(after.allocations - before.allocations == 1);
        CHECK(after.frees - before.frees == 1);

        // The caller's workspace: no allocation at all, the same bytes.
        DeviceBuffer workspace(runtime, needed);
        TestRun how;
        how.options.workspace = workspace.get();
        how.options.workspace_bytes = needed;
        before = runtime.counters();
        const RunOutcome supplied = prepared.run(how);
        after = runtime.counters();
        CHECK(after.allocations == before.allocations);
        const std::string difference = byte_difference(supplied.bytes, pooled.bytes, element_size(spec.activation));
        CHECK_MESSAGE(difference.empty(), difference);

        // Too small, or misaligned: refused before any launch.
        how.options.workspace_bytes = needed - 1;
        expect_refused(prepared.op(), prepared.inputs(), prepared.output(), "RunOptions::workspace holds", how.options);
        how.options.workspace_bytes = needed;
        how.options.workspace = workspace.get() + 16;
        prepared.output().poison();
        CHECK_THROWS_WITH_AS(prepared.op().run(prepared.inputs(), {prepared.output().tensor()}, how.options),
                             doctest::Contains("is not 256-byte aligned"), Error);
        CHECK(prepared.output().still_poisoned());
    }
}

TEST_CASE("paths with scratch replay from a CUDA graph, with the caller's workspace too")
{
    CudaRuntime& runtime = matmul_gpu();
    const OperatorCase& spec = case_named("f32 int8 prefill through dequantization and cuBLASLt");
    PreparedCase prepared(spec, 0xca97);
    const RunOutcome eager = prepared.run();
    const std::vector<TensorDesc> input_descs(prepared.inputs().begin(), prepared.inputs().end());
    DeviceBuffer workspace(runtime, prepared.op().workspace_bytes(input_descs, {prepared.output().tensor()}));
    RunOptions options;
    options.workspace = workspace.get();
    options.workspace_bytes = workspace.size();
    DeviceOutput& output = prepared.output();
    check_graph_replays(runtime, output, eager.bytes, element_size(spec.activation),
                        [&] { prepared.op().run(prepared.inputs(), {output.tensor()}, options); });
}

TEST_CASE("a second run of the same shapes reuses the plan; new shapes plan afresh")
{
    const OperatorCase& spec = case_named("fp16 int4 zero-point decode on 64 threads");
    PreparedCase prepared(spec, 7);
    prepared.op().clear_plan_cache();
    const ops::PlanCacheStats before = prepared.op().plan_cache_stats();
    const RunOutcome first = prepared.run();
    const RunOutcome second = prepared.run();
    const ops::PlanCacheStats after = prepared.op().plan_cache_stats();
    CHECK(after.misses - before.misses == 1);
    CHECK(after.hits - before.hits == 1);
    CHECK(first.bytes == second.bytes);
    std::vector<TensorDesc> inputs(prepared.inputs().begin(), prepared.inputs().end());
    CHECK(prepared.op().plan(inputs, {prepared.output().tensor()}).variant == first.plan.variant);
}

TEST_CASE("overrides passed in the operator's options stand instead of the environment's")
{
    const ScopedEnv environment(ops::kDownColumnsEnv, std::string("4"));
    constexpr std::size_t k = 18944;
    constexpr std::size_t n = 3584;
    constexpr std::size_t k_blocks = k / 32;
    // Descriptors only: plan() reads no data.
    const std::vector<TensorDesc> inputs = {Tensor::dense(0, DataType::Float16, {1, k}),
                                            Tensor::dense(0, DataType::Uint8, {n, k_blocks, 16}),
                                            Tensor::dense(0, DataType::Float16, {n, k_blocks})};
    const std::vector<TensorDesc> outputs = {Tensor::dense(0, DataType::Float16, {1, n})};
    const auto entry = [&](const std::optional<ops::PlanOverrides>& overrides) {
        const ops::MatMulNBits op(matmul_gpu_shared(), matmul_attributes(k, n, 4, 32, 0),
                                  MatMulNBitsOptions{KernelPolicy::Original, overrides});
        return std::get<ops::KernelStep>(op.plan(inputs, outputs).steps.at(0)).entry;
    };
    CHECK(entry(std::nullopt) == "matmul_nbits_gemv_f16_scales_f16_down_c4");
    CHECK(entry(ops::PlanOverrides{}) == "matmul_nbits_gemv_f16_scales_f16_down_c2");
    CHECK(entry(ops::PlanOverrides::parse({{ops::kDownColumnsEnv, "8"}})) == "matmul_nbits_gemv_f16_scales_f16_down");
}

TEST_CASE("many threads running one operator, and several operators, write the bytes of a single-threaded run")
{
    std::vector<std::unique_ptr<PreparedCase>> cases;
    std::vector<std::vector<std::uint8_t>> expected;
    for (const char* name : {"fp16 int4 zero-point decode on 64 threads", "fp16 int4 block-32 fp32-scale zero-point prefill with M and N tails", "f32 int8 prefill through dequantization and cuBLASLt"}) {
        cases.push_back(std::make_unique<PreparedCase>(case_named(name), 99));
        expected.push_back(cases.back()->run().bytes);
    }
    CudaRuntime& runtime = matmul_gpu();
    std::vector<std::unique_ptr<DeviceOutput>> outputs;
    constexpr int kThreads = 8;
    constexpr int kRuns = 20;
    for (int t = 0; t < kThreads; ++t) {
        PreparedCase& prepared = *cases[static_cast<std::size_t>(t) % cases.size()];
        outputs.push_back(std::make_unique<DeviceOutput>(runtime, prepared.output().tensor().dtype,
                                                         prepared.output().tensor().shape));
    }
    const std::vector<std::string> failures = run_on_caller_streams(runtime, kThreads, [&](int t, CUstream stream) {
        PreparedCase& prepared = *cases[static_cast<std::size_t>(t) % cases.size()];
        RunOptions options;
        options.stream = stream;
        for (int run = 0; run < kRuns; ++run) {
            prepared.op().run(prepared.inputs(), {outputs[static_cast<std::size_t>(t)]->tensor()}, options);
        }
    });
    for (int t = 0; t < kThreads; ++t) {
        CAPTURE(t);
        CHECK(failures[static_cast<std::size_t>(t)].empty());
        const std::size_t which = static_cast<std::size_t>(t) % cases.size();
        const std::string difference = byte_difference(outputs[static_cast<std::size_t>(t)]->bytes(), expected[which],
                                                       element_size(cases[which]->output().tensor().dtype));
        CHECK_MESSAGE(difference.empty(), difference);
    }
}

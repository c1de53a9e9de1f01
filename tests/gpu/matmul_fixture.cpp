#include "matmul_fixture.hpp"
#include "runtime/internals.hpp"

#include "cuda/driver.hpp"
#include "nbits/error.hpp"
#include "kernels.hpp"
#include "toolkit_include_dirs.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <variant>

namespace nbits::test {

const jit::EmbeddedFileSet& original_kernel_files();

const std::shared_ptr<CudaRuntime>& matmul_gpu_shared()
{
    // Never destroyed: tearing a context down during static destruction races
    // the driver's own exit handlers.
    static const auto* runtime = new std::shared_ptr<CudaRuntime>([] {
        RuntimeOptions options = shared_runtime_options();
        options.granularity = CompileGranularity::Source;
        return std::make_shared<CudaRuntime>(options);
    }());
    return *runtime;
}

CudaRuntime& matmul_gpu() { return *matmul_gpu_shared(); }

NodeAttributes matmul_attributes(std::size_t k, std::size_t n, std::size_t bits, std::size_t block_size,
                                 std::int64_t accuracy_level)
{
    NodeAttributes attributes;
    attributes.set("K", static_cast<std::int64_t>(k))
        .set("N", static_cast<std::int64_t>(n))
        .set("bits", static_cast<std::int64_t>(bits))
        .set("block_size", static_cast<std::int64_t>(block_size))
        .set("accuracy_level", accuracy_level);
    return attributes;
}

DeviceTensor upload(CudaRuntime& runtime, const HostTensor& host)
{
    DeviceTensor device;
    if (!host.present) {
        device.tensor = Tensor::absent(host.dtype);
        return device;
    }
    device.buffer = DeviceBuffer(runtime, host.bytes.size());
    if (!host.bytes.empty()) {
        runtime.htod(device.buffer.get(), host.bytes.data(), host.bytes.size());
    }
    device.tensor = Tensor::dense(device.buffer.get(), host.dtype, host.shape);
    return device;
}

DeviceTensors::DeviceTensors(CudaRuntime& runtime, const std::vector<HostTensor>& hosts)
{
    for (const HostTensor& host : hosts) {
        DeviceTensor device = upload(runtime, host);
        buffers_.push_back(std::move(device.buffer));
        tensors_.push_back(device.tensor);
    }
}

DeviceOutput::DeviceOutput(CudaRuntime& runtime, DataType dtype, std::vector<std::size_t> shape,
                           std::size_t capacity_bytes)
    : runtime_(&runtime)
{
    TensorDesc desc;
    desc.dtype = dtype;
    desc.shape = shape;
    buffer_ = DeviceBuffer(runtime, std::max(desc.byte_size(), capacity_bytes));
    tensor_ = Tensor::dense(buffer_.get(), dtype, std::move(shape));
    poison();
}

void DeviceOutput::poison()
{
    runtime_->memset_async(buffer_.get(), 0xA5, buffer_.size());
    runtime_->synchronize();
}

std::vector<std::uint8_t> DeviceOutput::bytes() const { return download<std::uint8_t>(*runtime_, buffer_); }

bool DeviceOutput::still_poisoned() const
{
    const std::vector<std::uint8_t> values = bytes();
    return std::all_of(values.begin(), values.end(), [](std::uint8_t byte) { return byte == 0xA5; });
}

std::vector<float> output_values(DataType dtype, const std::vector<std::uint8_t>& bytes)
{
    return real_values(dtype, bytes);
}

namespace {

std::string element_hex(const std::vector<std::uint8_t>& bytes, std::size_t element, std::size_t element_size)
{
    std::string hex = "0x";
    for (std::size_t byte = element_size; byte-- > 0;) {
        hex += fmt::format("{:02x}", bytes[element * element_size + byte]);
    }
    return hex;
}

}  // namespace

std::string byte_difference(const std::vector<std::uint8_t>& got, const std::vector<std::uint8_t>& expected,
                            std::size_t element_size)
{
    if (got == expected) {
        return {};
    }
    if (got.size() != expected.size()) {
        return fmt::format("the outputs have {} and {} bytes", got.size(), expected.size());
    }
    const std::size_t elements = got.size() / element_size;
    std::size_t differing = 0;
    std::size_t first = elements;
    for (std::size_t element = 0; element < elements; ++element) {
        if (std::memcmp(&got[element * element_size], &expected[element * element_size], element_size) != 0) {
            first = std::min(first, element);
            ++differing;
        }
    }
    return fmt::format("{} of {} elements differ; the first is element {}: {} where {} was expected", differing,
                       elements, first, element_hex(got, first, element_size),
                       element_hex(expected, first, element_size));
}

std::vector<std::string> kernel_entries(const ops::LaunchPlan& plan)
{
    std::vector<std::string> entries;
    for (const ops::PlanStep& step : plan.steps) {
        if (const auto* kernel = std::get_if<ops::KernelStep>(&step)) {
            entries.push_back(kernel->entry);
        }
    }
    return entries;
}

bool has_gemm_step(const ops::LaunchPlan& plan)
{
    return std::any_of(plan.steps.begin(), plan.steps.end(),
                       [](const ops::PlanStep& step) { return std::holds_alternative<ops::GemmStep>(step); });
}

RunOutcome run_into(ops::MatMulNBits& op, const std::vector<Tensor>& inputs, DeviceOutput& output,
                    const TestRun& how)
{
    CudaRuntime& runtime = matmul_gpu();
    output.poison();
    const std::uint64_t live = runtime.counters().live();
    RunOutcome outcome;
    outcome.plan = how.sources ? *ops::detail::OperatorAccess::run_with_sources(op, inputs, {output.tensor()},
                                                                                 how.options, how.sources)
                               : *op.run(inputs, {output.tensor()}, how.options);
    outcome.bytes = output.bytes();
    CHECK_MESSAGE(runtime.counters().live() == live, "the run of " << outcome.plan.variant
                                                                    << " left device allocations behind");
    return outcome;
}

void expect_refused(ops::MatMulNBits& op, const std::vector<Tensor>& inputs, DeviceOutput& output,
                    const std::string& message, const RunOptions& options)
{
    CudaRuntime& runtime = matmul_gpu();
    output.poison();
    const std::uint64_t live = runtime.counters().live();
    bool refused = false;
    try {
        op.run(inputs, {output.tensor()}, options);
    } catch (const Error& error) {
        refused = true;
        CHECK_MESSAGE(std::string(error.what()).find(message) != std::string::npos,
                      "the error says: " << error.what() << "\nexpected it to mention: " << message);
    }
    CHECK_MESSAGE(refused, "the run succeeded; expected an error mentioning: " << message);
    CHECK_MESSAGE(runtime.counters().live() == live, "the refused run left device allocations behind");
    CHECK_MESSAGE(output.still_poisoned(), "the refused run wrote into the output");
}

ScopedEnv::ScopedEnv(std::string name, const std::optional<std::string>& value) : name_(std::move(name))
{
    if (const char* previous = std::getenv(name_.c_str())) {
        previous_ = previous;
    }
    if (value) {
        setenv(name_.c_str(), value->c_str(), 1);
    } else {
        unsetenv(name_.c_str());
    }
}

ScopedEnv::~ScopedEnv()
{
    if (previous_) {
        setenv(name_.c_str(), previous_->c_str(), 1);
    } else {
        unsetenv(name_.c_str());
    }
}

CapturedGraph::CapturedGraph(CudaRuntime& runtime, const std::function<void()>& record) : runtime_(runtime)
{
    CudaRuntime::Internals::ScopedContext scope(runtime_);
    const cuda::Driver& driver = cuda::driver();
    cuda::check(driver.stream_begin_capture(runtime_.stream(), CU_STREAM_CAPTURE_MODE_GLOBAL),
                "beginning a stream capture");
    try {
        record();
    } catch (...) {
        CUgraph broken = nullptr;
        driver.stream_end_capture(runtime_.stream(), &broken);
        if (broken != nullptr) {
            driver.graph_destroy(broken);
        }
        throw;
    }
    cuda::check(driver.stream_end_capture(runtime_.stream(), &graph_), "ending the stream capture");
    const CUresult instantiated = driver.graph_instantiate(&exec_, graph_, 0);
    if (instantiated != CUDA_SUCCESS) {
        driver.graph_destroy(graph_);
        cuda::check(instantiated, "instantiating the captured graph");
    }
}

CallerStream::CallerStream(CudaRuntime& runtime) : runtime_(runtime)
{
    CudaRuntime::Internals::ScopedContext scope(runtime_);
    cuda::check(cuda::driver().stream_create(&stream_, CU_STREAM_NON_BLOCKING), "creating a caller stream");
}

CallerStream::~CallerStream()
{
    CudaRuntime::Internals::ScopedContext scope(runtime_);
    cuda::driver().stream_synchronize(stream_);
    cuda::driver().stream_destroy(stream_);
}

void CallerStream::synchronize()
{
    CudaRuntime::Internals::ScopedContext scope(runtime_);
    cuda::check(cuda::driver().stream_synchronize(stream_), "waiting for the caller stream");
}

std::vector<std::string> run_on_caller_streams(CudaRuntime& runtime, int threads,
                                               const std::function<void(int index, CUstream stream)>& body)
{
    std::vector<std::string> failures(static_cast<std::size_t>(threads));
    std::vector<std::thread> running;
    for (int t = 0; t < threads; ++t) {
        running.emplace_back([&, t] {
            try {
                CallerStream stream(runtime);
                body(t, stream.get());
                stream.synchronize();
            } catch (const std::exception& error) {
                failures[static_cast<std::size_t>(t)] = error.what();
            }
        });
    }
    for (std::thread& thread : running) {
        thread.join();
    }
    return failures;
}

void check_graph_replays(CudaRuntime& runtime, DeviceOutput& output, const std::vector<std::uint8_t>& eager,
                         std::size_t element_size, const std::function<void()>& record, int replays)
{
    const std::uint64_t live = runtime.counters().live();
    {
        output.poison();
        CapturedGraph graph(runtime, record);
        CHECK_MESSAGE(output.still_poisoned(), "the capture ran kernels instead of recording them");
        for (int replay = 0; replay < replays; ++replay) {
            CAPTURE(replay);
            output.poison();
            graph.replay();
            const std::string difference = byte_difference(output.bytes(), eager, element_size);
            CHECK_MESSAGE(difference.empty(), difference);
        }
    }
    CHECK_MESSAGE(runtime.counters().live() == live, "capturing or replaying left allocations behind");
}

CapturedGraph::~CapturedGraph()
{
    CudaRuntime::Internals::ScopedContext scope(runtime_);
    if (exec_ != nullptr) {
        cuda::driver().graph_exec_destroy(exec_);
    }
    if (graph_ != nullptr) {
        cuda::driver().graph_destroy(graph_);
    }
}

void CapturedGraph::replay()
{
    CudaRuntime::Internals::ScopedContext scope(runtime_);
    cuda::check(cuda::driver().graph_launch(exec_, runtime_.stream()), "launching the captured graph");
}

namespace reference {
namespace {

std::string original_text(std::string_view path)
{
    for (const jit::EmbeddedFile& file : original_kernel_files()) {
        if (path == file.path) {
            return std::string(file.text, file.size);
        }
    }
    throw Error(ErrorKind::InvalidArgument, fmt::format("no original kernel file {}", path));
}

const std::vector<jit::KernelSource>& originals()
{
    static const std::vector<jit::KernelSource> sources =
        jit::sources_from(original_kernel_files(), test::toolkit_include_dirs());
    return sources;
}

// The staged down projection uses helpers of gemv_f16.cu, so it is compiled
// appended to it, as the original test did.
const jit::KernelSource& staged_down_source()
{
    static const jit::KernelSource source("original_gemv_f16_with_staged_down",
                                          original_text("gemv_f16.cu") + "\n" +
                                              original_text("staged_down_reference.cu"),
                                          {}, test::toolkit_include_dirs());
    return source;
}

// Test-only kernels: the original silu reference under the new entry name and
// signature (grid-stride, `y` may alias `b`), and SkipSimplifiedLayerNormalization
// as shared/docs/ORIGINAL.md describes skip_rmsnorm_f16_warp_half4.
constexpr const char* kTestKernels = R"(
extern "C" __global__ void matmul_nbits_silu_mul_f16(const __half* a, const __half* b, __half* y, const int n)
{
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        y[i] = __float2half_rn(__fmul_rn(ref_op_silu(__half2float(a[i])), __half2float(b[i])));
    }
}

union TestSkipHalf4 {
    unsigned long long raw;
    __half2 pair[2];
};

__device__ __forceinline__ void test_skip_residual(
    const unsigned long long* input4, const unsigned long long* skip4, const int chunk, TestSkipHalf4& residual)
{
    TestSkipHalf4 input;
    TestSkipHalf4 skip;
    input.raw = input4[chunk];
    skip.raw = skip4[chunk];
    residual.pair[0] = __hadd2(input.pair[0], skip.pair[0]);
    residual.pair[1] = __hadd2(input.pair[1], skip.pair[1]);
}

extern "C" __global__ void test_skip_rmsnorm_f16_warp_half4(
    const __half* input,
    const __half* skip,
    const void* gamma,
    __half* output,
    __half* input_skip_sum,
    const int norm_size,
    const int rows,
    const int gamma_is_half,
    const float epsilon)
{
    const int row = (int)blockIdx.x;
    if (row >= rows) return;
    const long base = (long)row * norm_size;
    const int lane = (int)threadIdx.x;
    const int chunks_per_lane = norm_size / (32 * 4);
    const unsigned long long* input4 = reinterpret_cast<const unsigned long long*>(input + base);
    const unsigned long long* skip4 = reinterpret_cast<const unsigned long long*>(skip + base);
    const unsigned long long* gamma4 = reinterpret_cast<const unsigned long long*>(gamma);
    unsigned long long* sum4 = reinterpret_cast<unsigned long long*>(input_skip_sum + base);
    unsigned long long* output4 = reinterpret_cast<unsigned long long*>(output + base);
    float ss0 = 0.0f;
    float ss1 = 0.0f;
    float ss2 = 0.0f;
    float ss3 = 0.0f;
    for (int item = 0; item < chunks_per_lane; ++item) {
        const int chunk = lane + item * 32;
        TestSkipHalf4 residual;
        test_skip_residual(input4, skip4, chunk, residual);
        sum4[chunk] = residual.raw;
        const float2 rounded0 = __half22float2(residual.pair[0]);
        const float2 rounded1 = __half22float2(residual.pair[1]);
        ss0 += rounded0.x * rounded0.x;
        ss1 += rounded0.y * rounded0.y;
        ss2 += rounded1.x * rounded1.x;
        ss3 += rounded1.y * rounded1.y;
    }
    float ss = (ss0 + ss1) + (ss2 + ss3);
    for (int off = 16; off > 0; off >>= 1) {
        ss += __shfl_down_sync(0xffffffffu, ss, off);
    }
    float inv_std = 0.0f;
    if (lane == 0) {
        inv_std = 1.0f / sqrtf(ss / (float)norm_size + epsilon);
    }
    inv_std = __shfl_sync(0xffffffffu, inv_std, 0);
    for (int item = 0; item < chunks_per_lane; ++item) {
        const int chunk = lane + item * 32;
        TestSkipHalf4 residual;
        TestSkipHalf4 normalized;
        test_skip_residual(input4, skip4, chunk, residual);
        const float2 value0 = __half22float2(residual.pair[0]);
        const float2 value1 = __half22float2(residual.pair[1]);
        float scale0x, scale0y, scale1x, scale1y;
        if (gamma_is_half) {
            TestSkipHalf4 scale;
            scale.raw = gamma4[chunk];
            const float2 scale0 = __half22float2(scale.pair[0]);
            const float2 scale1 = __half22float2(scale.pair[1]);
            scale0x = scale0.x;
            scale0y = scale0.y;
            scale1x = scale1.x;
            scale1y = scale1.y;
        } else {
            const int j = chunk << 2;
            const float* gamma_f = reinterpret_cast<const float*>(gamma);
            scale0x = gamma_f[j];
            scale0y = gamma_f[j + 1];
            scale1x = gamma_f[j + 2];
            scale1y = gamma_f[j + 3];
        }
        normalized.pair[0] = __floats2half2_rn(value0.x * inv_std * scale0x, value0.y * inv_std * scale0y);
        normalized.pair[1] = __floats2half2_rn(value1.x * inv_std * scale1x, value1.y * inv_std * scale1y);
        output4[chunk] = normalized.raw;
    }
}
)";

const jit::KernelSource& test_kernels()
{
    static const jit::KernelSource source("nbits_test_reference_kernels",
                                          original_text("ref_silu_mul.cu") + "\n" + kTestKernels, {},
                                          test::toolkit_include_dirs());
    return source;
}

void launch(CudaRuntime& runtime, const jit::KernelSource& source, std::string_view entry, const LaunchConfig& config,
            KernelArgs& args)
{
    runtime.internals().launch(runtime.internals().function(source, entry), config, args, entry);
}

std::uint32_t blocks_of(int count, int threads) { return static_cast<std::uint32_t>((count + threads - 1) / threads); }

}  // namespace

const jit::KernelSource* original_source_of(std::string_view entry)
{
    if (entry == "matmul_nbits_silu_mul_f16") {
        return &test_kernels();
    }
    for (const jit::KernelSource& source : originals()) {
        if (source.name() != "staged_down_reference" && source.has_entry(entry)) {
            return &source;
        }
    }
    return nullptr;
}

TestRun original_kernels(std::set<std::string>& overridden)
{
    TestRun how;
    how.sources = [&overridden](const ops::KernelStep& step) -> const jit::KernelSource* {
        const jit::KernelSource* source = original_source_of(step.entry);
        if (source != nullptr) {
            overridden.insert(step.entry);
        }
        return source;
    };
    return how;
}

void staged_down(CudaRuntime& runtime, CUdeviceptr activation, CUdeviceptr packed, CUdeviceptr scales,
                 CUdeviceptr output, int k, int n)
{
    const int block_size = 32;
    const int k_blocks = k / block_size;
    const auto shared_bytes = static_cast<std::uint32_t>(k * 2);
    const char* entry = "matmul_nbits_gemv_f16_scales_f16_down_staged_reference";
    CUfunction function = runtime.internals().function(staged_down_source(), entry);
    runtime.internals().configure_dynamic_shared_memory(function, shared_bytes, entry);
    KernelArgs args;
    args.ptr(activation).ptr(packed).ptr(scales).ptr(0).ptr(0).ptr(output);
    args.i32(k).i32(n).i32(block_size).i32(k_blocks).i32(block_size / 2).i32((k_blocks + 1) / 2).i32(1).i32(0);
    runtime.internals().launch(function, LaunchConfig{{blocks_of(n, 8), 1, 1}, {256, 1, 1}, shared_bytes}, args, entry);
}

void silu_mul(CudaRuntime& runtime, CUdeviceptr gate, CUdeviceptr up, CUdeviceptr output, int count)
{
    KernelArgs args;
    args.ptr(gate).ptr(up).ptr(output).i32(count);
    launch(runtime, test_kernels(), "ref_silu_mul_f16", LaunchConfig{{blocks_of(count, 256), 1, 1}, {256, 1, 1}, 0},
           args);
}

void rmsnorm(CudaRuntime& runtime, CUdeviceptr activation, CUdeviceptr gamma, bool gamma_is_half,
             CUdeviceptr normalized, int norm_size, int rows, float epsilon)
{
    const char* entry = "matmul_nbits_rmsnorm_f16_warp_half4";
    KernelArgs args;
    args.ptr(activation).ptr(gamma).ptr(normalized).i32(norm_size).i32(rows).i32(gamma_is_half ? 1 : 0).f32(epsilon);
    launch(runtime, *original_source_of(entry), entry,
           LaunchConfig{{static_cast<std::uint32_t>(rows), 1, 1}, {32, 1, 1}, 0}, args);
}

void skip_rmsnorm(CudaRuntime& runtime, CUdeviceptr input, CUdeviceptr skip, CUdeviceptr gamma, bool gamma_is_half,
                  CUdeviceptr normalized, CUdeviceptr sum, int norm_size, int rows, float epsilon)
{
    KernelArgs args;
    args.ptr(input).ptr(skip).ptr(gamma).ptr(normalized).ptr(sum);
    args.i32(norm_size).i32(rows).i32(gamma_is_half ? 1 : 0).f32(epsilon);
    launch(runtime, test_kernels(), "test_skip_rmsnorm_f16_warp_half4",
           LaunchConfig{{static_cast<std::uint32_t>(rows), 1, 1}, {32, 1, 1}, 0}, args);
}

void nbits_entry(CudaRuntime& runtime, std::string_view entry, const LaunchConfig& config, KernelArgs& args)
{
    launch(runtime, kernels::source_of_entry(entry), entry, config, args);
}

}  // namespace reference

PreparedCase::PreparedCase(const OperatorCase& spec, std::uint64_t seed)
    : down_columns_("ONNX_GENAI_DOWN_COLS", spec.down_columns),
      accuracy4_warps_("ONNX_GENAI_ACC4_WARPS", std::nullopt),
      op_(std::make_unique<ops::MatMulNBits>(matmul_gpu_shared(), spec.attributes())),
      inputs_(matmul_gpu(), spec.random_inputs(seed)),
      output_(matmul_gpu(), spec.activation, {spec.m, spec.n})
{
}

void for_each_operator_case(std::uint64_t seed, const std::function<void(const OperatorCase&, PreparedCase&)>& check)
{
    const std::vector<OperatorCase>& cases = operator_cases();
    for (std::size_t index = 0; index < cases.size(); ++index) {
        const OperatorCase& spec = cases[index];
        CAPTURE(spec.name);
        try {
            PreparedCase prepared(spec, seed + index);
            check(spec, prepared);
        } catch (const std::exception& error) {
            FAIL_CHECK(error.what());
        }
    }
}

}  // namespace nbits::test

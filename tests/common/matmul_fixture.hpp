#pragma once

// What the MatMulNBits GPU tests share: their runtime, host tensors on the
// device, one poisoned output per run, the original kernels as an oracle,
// CUDA-graph capture, and the table of operator configurations that covers
// every kernel entry.

#include "gpu_fixture.hpp"
#include "host_reference.hpp"
#include "jit/kernel_source.hpp"
#include "nbits/matmul_nbits.hpp"
#include "ops/testing.hpp"
#include "runtime/kernel_args.hpp"

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace nbits::test {

// The runtime of the MatMulNBits tests. Unlike the shared `gpu()` it compiles
// each kernel file once (CompileGranularity::Source): the original kernel
// files are large translation units without per-entry guards, and these tests
// launch nearly every entry of them.
CudaRuntime& matmul_gpu();
const std::shared_ptr<CudaRuntime>& matmul_gpu_shared();

// {K, N, bits, block_size, accuracy_level}.
NodeAttributes matmul_attributes(std::size_t k, std::size_t n, std::size_t bits, std::size_t block_size,
                                 std::int64_t accuracy_level);

// A host tensor on the device; an absent one has no buffer.
struct DeviceTensor {
    DeviceBuffer buffer;
    Tensor tensor;
};

DeviceTensor upload(CudaRuntime& runtime, const HostTensor& host);

// Several uploaded tensors, in order, alive as long as this object.
class DeviceTensors {
public:
    DeviceTensors(CudaRuntime& runtime, const std::vector<HostTensor>& hosts);
    const std::vector<Tensor>& tensors() const { return tensors_; }
    const Tensor& operator[](std::size_t index) const { return tensors_.at(index); }

private:
    std::vector<DeviceBuffer> buffers_;
    std::vector<Tensor> tensors_;
};

// An output tensor whose buffer is poisoned (0xA5 bytes) before every run, so
// that an element a kernel did not write shows. `capacity_bytes` may exceed
// the tensor's size (an empty [0, N] output over N elements of memory).
class DeviceOutput {
public:
    DeviceOutput(CudaRuntime& runtime, DataType dtype, std::vector<std::size_t> shape,
                 std::size_t capacity_bytes = 0);

    const Tensor& tensor() const { return tensor_; }
    void poison();
    std::vector<std::uint8_t> bytes() const;
    bool still_poisoned() const;

private:
    CudaRuntime* runtime_;
    DeviceBuffer buffer_;
    Tensor tensor_;
};

// Float values of fp16 or f32 output bytes.
std::vector<float> output_values(DataType dtype, const std::vector<std::uint8_t>& bytes);

// "" when equal, else where the first of `element_size`-byte elements differs
// and how many differ.
std::string byte_difference(const std::vector<std::uint8_t>& got, const std::vector<std::uint8_t>& expected,
                            std::size_t element_size);

// The kernel entries a plan launches, in order.
std::vector<std::string> kernel_entries(const ops::LaunchPlan& plan);
bool has_gemm_step(const ops::LaunchPlan& plan);

struct RunOutcome {
    ops::LaunchPlan plan;
    std::vector<std::uint8_t> bytes;  // the whole output buffer after the run
};

// How a test runs an operator: the run options, and optionally other kernel
// sources (the original kernels) through the same plan.
struct TestRun {
    RunOptions options;
    ops::detail::KernelSourceOverride sources;
};

// Poisons `output`, runs the operator, downloads the output, and checks that
// the run left no device allocation behind.
RunOutcome run_into(ops::MatMulNBits& op, const std::vector<Tensor>& inputs, DeviceOutput& output,
                    const TestRun& how = {});

// Expects the run to throw Error mentioning `message` ("" accepts any), to
// leave no allocation behind and to launch nothing into the poisoned output.
void expect_refused(ops::MatMulNBits& op, const std::vector<Tensor>& inputs, DeviceOutput& output,
                    const std::string& message, const RunOptions& options = {});

// Sets (or, with nullopt, unsets) an environment variable for a scope.
class ScopedEnv {
public:
    ScopedEnv(std::string name, const std::optional<std::string>& value);
    ~ScopedEnv();
    ScopedEnv(const ScopedEnv&) = delete;
    ScopedEnv& operator=(const ScopedEnv&) = delete;

private:
    std::string name_;
    std::optional<std::string> previous_;
};

// A non-blocking stream of the runtime's context (a caller's stream), synchronised and destroyed with this object.
class CallerStream {
public:
    explicit CallerStream(CudaRuntime& runtime);
    ~CallerStream();
    CallerStream(const CallerStream&) = delete;
    CallerStream& operator=(const CallerStream&) = delete;
    CUstream get() const { return stream_; }
    void synchronize();

private:
    CudaRuntime& runtime_;
    CUstream stream_ = nullptr;
};

// Calls body(index, stream) on `threads` threads at once, each with a caller stream of its own that it
// synchronises at the end; the error each thread caught ("" where none).
std::vector<std::string> run_on_caller_streams(CudaRuntime& runtime, int threads,
                                               const std::function<void(int index, CUstream stream)>& body);

// `record` enqueued on the runtime's stream, captured into a CUDA graph in
// global capture mode and instantiated; both are destroyed with this object.
class CapturedGraph {
public:
    CapturedGraph(CudaRuntime& runtime, const std::function<void()>& record);
    ~CapturedGraph();
    CapturedGraph(const CapturedGraph&) = delete;
    CapturedGraph& operator=(const CapturedGraph&) = delete;

    void replay();  // enqueued on the runtime's stream

private:
    CudaRuntime& runtime_;
    CUgraph graph_ = nullptr;
    CUgraphExec exec_ = nullptr;
};

// Records `record` (a run into `output`) into a CUDA graph, checks that the
// capture launched nothing, then that each of `replays` replays writes
// `eager` into the poisoned output and that nothing is left allocated.
void check_graph_replays(CudaRuntime& runtime, DeviceOutput& output, const std::vector<std::uint8_t>& eager,
                         std::size_t element_size, const std::function<void()>& record, int replays = 2);

// The original kernels (tests/third_party/onnx_runtime_ep_cuda) and the
// test-only references built from them or from the description in
// shared/docs/ORIGINAL.md.
namespace reference {

// The original file that declares `entry`; for matmul_nbits_silu_mul_f16,
// which the original has under no such name, a wrapper of ref_silu_mul_f16
// with the new signature. nullptr when there is none.
const jit::KernelSource* original_source_of(std::string_view entry);

// A run that swaps every kernel step for the original entry of the same
// name; `overridden` collects the entries that were swapped.
TestRun original_kernels(std::set<std::string>& overridden);

// The original staged down projection, compiled appended to gemv_f16.cu:
// grid ceil(N/8), 256 threads, K*2 bytes of dynamic shared memory.
void staged_down(CudaRuntime& runtime, CUdeviceptr activation, CUdeviceptr packed, CUdeviceptr scales,
                 CUdeviceptr output, int k, int n);
// The original test's ref_silu_mul_f16: y = fp16(silu(gate) * up).
void silu_mul(CudaRuntime& runtime, CUdeviceptr gate, CUdeviceptr up, CUdeviceptr output, int count);
// The original matmul_nbits_rmsnorm_f16_warp_half4: one warp per row.
void rmsnorm(CudaRuntime& runtime, CUdeviceptr activation, CUdeviceptr gamma, bool gamma_is_half,
             CUdeviceptr normalized, int norm_size, int rows, float epsilon);
// SkipSimplifiedLayerNormalization as skip_rmsnorm_f16_warp_half4 computes it:
// sum = input + skip (fp16), normalized = fp16(sum * inv_std * gamma).
void skip_rmsnorm(CudaRuntime& runtime, CUdeviceptr input, CUdeviceptr skip, CUdeviceptr gamma, bool gamma_is_half,
                  CUdeviceptr normalized, CUdeviceptr sum, int norm_size, int rows, float epsilon);
// One entry of nbits' own kernels, launched directly.
void nbits_entry(CudaRuntime& runtime, std::string_view entry, const LaunchConfig& config, KernelArgs& args);

}  // namespace reference

// One operator configuration of the table that the original-kernel parity and
// the capture tests walk: shape, layout, node markers, and what the plan must
// launch on an H200.
struct OperatorCase {
    std::string name;
    DataType activation = DataType::Float16;
    std::size_t m = 1;
    std::size_t k = 0;
    std::size_t n = 0;
    std::size_t bits = 4;
    std::size_t block_size = 32;
    std::int64_t accuracy_level = 0;
    DataType scales = DataType::Float16;
    bool zero_points = false;
    bool bias = false;
    bool per_token_bias = false;  // the bias slot holds a folded residual [m, n]
    bool folded_bias = false;
    bool g_idx = false;
    std::optional<DataType> gamma;  // the RMS-norm prologue, with gamma's dtype
    bool gate_up = false;
    std::optional<std::string> down_columns;  // ONNX_GENAI_DOWN_COLS during the run
    std::vector<std::string> entries;         // the kernel entries the plan launches, in order
    bool gemm = false;                        // and a cuBLASLt GEMM after them

    static OperatorCase f16(std::string name, std::size_t m, std::size_t k, std::size_t n);
    static OperatorCase f32(std::string name, std::size_t m, std::size_t k, std::size_t n);

    OperatorCase& int8();
    OperatorCase& block(std::size_t size);
    OperatorCase& accuracy4();
    OperatorCase& fp32_scales();
    OperatorCase& with_zero_points();
    OperatorCase& with_bias();
    OperatorCase& with_folded_bias();
    OperatorCase& with_folded_residual();
    OperatorCase& with_g_idx();
    OperatorCase& rmsnorm(DataType gamma_dtype);
    OperatorCase& paired_gate_up();
    OperatorCase& forced_down_columns(std::string columns);
    OperatorCase& launches(std::vector<std::string> kernel_entries, bool then_gemm = false);

    NodeAttributes attributes() const;
    // Random non-zero inputs in the operator's slot order: activations in
    // [-1, 1], random packed bytes and zero points, scales in [0.01, 0.03],
    // gamma in [0.5, 1].
    std::vector<HostTensor> random_inputs(std::uint64_t seed) const;
    // Scratch is stream-ordered, so only the g_idx range check (a device-to-host read) is not capturable.
    bool capture_safe() const { return m > 0 && !g_idx; }
};

// The configurations; together their plans launch every entry.
const std::vector<OperatorCase>& operator_cases();
// The 32 entries of the original plus matmul_nbits_silu_mul_f16.
const std::set<std::string>& all_kernel_entries();

// A case's operator (built with its environment override in place), its random
// inputs on the device and its output.
class PreparedCase {
public:
    PreparedCase(const OperatorCase& spec, std::uint64_t seed);

    ops::MatMulNBits& op() { return *op_; }
    const std::vector<Tensor>& inputs() const { return inputs_.tensors(); }
    DeviceOutput& output() { return output_; }
    RunOutcome run(const TestRun& how = {}) { return run_into(*op_, inputs(), output_, how); }

private:
    ScopedEnv down_columns_;
    ScopedEnv accuracy4_warps_;
    std::unique_ptr<ops::MatMulNBits> op_;
    DeviceTensors inputs_;
    DeviceOutput output_;
};

// Runs `check` on each case of the table with its prepared operator (inputs
// seeded from `seed` and the case's index), naming the case in every failure.
// An exception fails that case, and the walk goes on.
void for_each_operator_case(std::uint64_t seed, const std::function<void(const OperatorCase&, PreparedCase&)>& check);

}  // namespace nbits::test

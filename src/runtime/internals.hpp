#pragma once

// What nbits' own code reaches through CudaRuntime::internals(): the JIT
// module cache, the one launch helper, dynamic shared-memory opt-in, the
// stream-ordered scratch pool, counted allocations and the cuBLASLt handle.

#include "nbits/runtime.hpp"

#include "jit/compile.hpp"
#include "jit/disk_cache.hpp"
#include "runtime/kernel_args.hpp"
#include "runtime/module_cache.hpp"

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

struct cublasLtContext;

namespace nbits {

namespace ops {
struct KernelStep;
}

// What `configure_dynamic_shared_memory` does for a request.
enum class SharedMemoryAction {
    Unchanged,   // fits the default per-block budget
    RaiseLimit,  // fits only after raising CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
};

// Pure decision: the function's static shared memory is subtracted from both
// budgets. Throws Error(Unsupported) when `requested` exceeds the opt-in one.
SharedMemoryAction decide_dynamic_shared_memory(std::uint32_t requested, std::uint32_t static_bytes,
                                                const Capabilities& capabilities, const std::string& what);

class CudaRuntime::Internals {
public:
    explicit Internals(const RuntimeOptions& options);
    ~Internals();
    Internals(const Internals&) = delete;
    Internals& operator=(const Internals&) = delete;

    int ordinal() const { return ordinal_; }
    CUcontext context() const { return context_; }
    CUstream stream() const { return stream_; }
    const Capabilities& capabilities() const { return capabilities_; }

    // Makes this runtime's context current on the calling thread for a scope.
    class ScopedContext {
    public:
        explicit ScopedContext(const Internals& runtime);
        explicit ScopedContext(const CudaRuntime& runtime) : ScopedContext(runtime.internals()) {}
        ~ScopedContext();
        ScopedContext(const ScopedContext&) = delete;
        ScopedContext& operator=(const ScopedContext&) = delete;

    private:
        bool pushed_ = false;
    };

    // The stream a call runs on: `requested`, checked to belong to this
    // runtime's context, or the runtime's own stream for nullptr.
    CUstream stream_for(CUstream requested) const;

    // JIT: the loaded function for `entry` of `source` specialised by
    // `defines`, compiled once per process.
    CUfunction function(const jit::KernelSource& source, std::string_view entry, const jit::Defines& defines = {},
                        bool arch_specific = false);
    ModuleCache& modules() { return *modules_; }
    jit::DiskCache* disk_cache() const { return disk_cache_.get(); }

    // Raises the function's dynamic shared-memory limit when `requested`
    // exceeds the default budget (and what was raised before: the limit only
    // grows, so operators sharing a function never lower it under each
    // other); throws (never launches) beyond the opt-in one.
    void configure_dynamic_shared_memory(CUfunction function, std::uint32_t requested, std::string_view what);

    // The loaded function of a planned kernel step (from `source`, else the
    // embedded source the step names), its dynamic shared memory configured
    // as the step asks.
    CUfunction step_function(const ops::KernelStep& step, const jit::KernelSource* source = nullptr);

    // The one launch helper: `what` names the launch in errors.
    void launch(CUfunction function, const LaunchConfig& config, KernelArgs& args, CUstream stream,
                std::string_view what);
    void launch(CUfunction function, const LaunchConfig& config, KernelArgs& args, std::string_view what)
    {
        launch(function, config, args, stream_, what);
    }

    // The cuBLASLt handle, created on first use.
    cublasLtContext* blas();

    // Counted device memory. Throws Error(OutOfMemory) when the device (or
    // the test budget) has no room; nothing stays allocated then.
    CUdeviceptr allocate(std::size_t bytes);
    void release(CUdeviceptr pointer);
    // Scratch of one call from nbits' stream-ordered pool: the allocation
    // and the release are ordered on `stream`, so neither waits for the GPU
    // and both may be captured into a CUDA graph.
    CUdeviceptr allocate_async(std::size_t bytes, CUstream stream);
    void release_async(CUdeviceptr pointer, CUstream stream);
    AllocationCounters counters() const { return {allocations_.load(), frees_.load()}; }

    // Tests: after `allocations` more successful allocations, every further
    // one fails with Error(OutOfMemory); nullopt lifts the budget.
    void set_allocation_budget(std::optional<std::uint64_t> allocations);

private:
    void take_allocation(std::size_t bytes);

    int ordinal_ = 0;
    CUdevice device_ = 0;
    CUcontext context_ = nullptr;
    CUstream stream_ = nullptr;
    CUmemoryPool pool_ = nullptr;
    Capabilities capabilities_;
    std::shared_ptr<jit::DiskCache> disk_cache_;
    std::unique_ptr<ModuleCache> modules_;
    std::mutex shared_memory_mutex_;
    std::unordered_map<CUfunction, std::uint32_t> raised_shared_memory_;
    std::mutex blas_mutex_;
    cublasLtContext* blas_ = nullptr;
    std::atomic<std::uint64_t> allocations_{0};
    std::atomic<std::uint64_t> frees_{0};
    // Remaining allocations under the test budget; negative: no budget.
    std::atomic<std::int64_t> budget_{-1};
    // NBITS_SYNC_LAUNCHES=1: wait for every launch, so that a kernel fault is
    // reported by the launch that caused it (debugging; never while capturing).
    bool synchronous_launches_ = false;
};

}  // namespace nbits

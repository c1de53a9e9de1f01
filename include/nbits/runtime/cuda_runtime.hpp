#pragma once

#include "nbits/jit/disk_cache.hpp"
#include "nbits/runtime/capabilities.hpp"
#include "nbits/runtime/launch.hpp"
#include "nbits/runtime/module_cache.hpp"

#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

struct cublasLtContext;

namespace nbits {

struct RuntimeOptions {
    int device = 0;
    CompileGranularity granularity = CompileGranularity::Entry;
    jit::DiskCacheOptions disk_cache;
};

struct AllocationCounters {
    std::uint64_t allocations = 0;
    std::uint64_t frees = 0;
    std::uint64_t live() const { return allocations - frees; }
};

// One GPU: its primary context, one non-blocking stream that every nbits
// launch is ordered on, the device capabilities, counted allocations, the
// JIT module cache and the cuBLASLt handle.
class CudaRuntime {
public:
    // Throws Error(NoDriver) without a driver, Error(NoDevice) without the
    // requested device, Error(UnsupportedDevice) for a compute capability 0.
    explicit CudaRuntime(const RuntimeOptions& options = {});
    ~CudaRuntime();
    CudaRuntime(const CudaRuntime&) = delete;
    CudaRuntime& operator=(const CudaRuntime&) = delete;

    int device() const { return ordinal_; }
    CUcontext context() const { return context_; }
    CUstream stream() const { return stream_; }
    const Capabilities& capabilities() const { return capabilities_; }

    // Memory. `alloc_raw(0)` allocates one byte, as the original did.
    CUdeviceptr alloc_raw(std::size_t bytes);
    void free_raw(CUdeviceptr pointer);
    AllocationCounters counters() const;

    void htod(CUdeviceptr destination, const void* source, std::size_t bytes);   // synchronous
    void dtoh(void* destination, CUdeviceptr source, std::size_t bytes);         // synchronizes the stream first
    void dtod(CUdeviceptr destination, CUdeviceptr source, std::size_t bytes);   // synchronizes the stream first
    void dtod_async(CUdeviceptr destination, CUdeviceptr source, std::size_t bytes);  // ordered on the stream
    void memset_async(CUdeviceptr destination, std::uint8_t value, std::size_t bytes);
    void synchronize();

    // JIT: the loaded function for `entry` of `source`, compiled once.
    CUfunction function(const jit::KernelSource& source, std::string_view entry);
    ModuleCache& modules() { return *modules_; }
    jit::DiskCache* disk_cache() const { return disk_cache_.get(); }
    const std::vector<std::string>& include_dirs() const { return include_dirs_; }
    // Throws Error(MissingHeaders) naming `op` when NVRTC cannot find cuda_fp16.h.
    void require_nvrtc_half_headers(std::string_view op) const;

    // Raises the function's dynamic shared-memory limit when `requested`
    // exceeds the default budget; throws (never launches) beyond the opt-in one.
    void configure_dynamic_shared_memory(CUfunction function, std::uint32_t requested, std::string_view what);

    // The one launch helper: `what` names the launch in errors.
    void launch(CUfunction function, const LaunchConfig& config, KernelArgs& args, std::string_view what);

    // The cuBLASLt handle, created on first use.
    cublasLtContext* blas();

    // Makes this runtime's context current on the calling thread for a scope.
    class ScopedContext {
    public:
        explicit ScopedContext(const CudaRuntime& runtime);
        ~ScopedContext();
        ScopedContext(const ScopedContext&) = delete;
        ScopedContext& operator=(const ScopedContext&) = delete;

    private:
        bool pushed_ = false;
    };

private:
    int ordinal_ = 0;
    CUdevice device_ = 0;
    CUcontext context_ = nullptr;
    CUstream stream_ = nullptr;
    Capabilities capabilities_;
    std::vector<std::string> include_dirs_;
    std::shared_ptr<jit::DiskCache> disk_cache_;
    std::unique_ptr<ModuleCache> modules_;
    std::mutex blas_mutex_;
    cublasLtContext* blas_ = nullptr;
    std::atomic<std::uint64_t> allocations_{0};
    std::atomic<std::uint64_t> frees_{0};
};

// Device memory owned for a scope: freed through the runtime (counted) on
// every path, errors included.
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    DeviceBuffer(CudaRuntime& runtime, std::size_t bytes);
    ~DeviceBuffer();
    DeviceBuffer(DeviceBuffer&& other) noexcept;
    DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    CUdeviceptr get() const { return pointer_; }
    std::size_t size() const { return bytes_; }
    explicit operator bool() const { return pointer_ != 0; }
    void reset();

private:
    CudaRuntime* runtime_ = nullptr;
    CUdeviceptr pointer_ = 0;
    std::size_t bytes_ = 0;
};

}  // namespace nbits

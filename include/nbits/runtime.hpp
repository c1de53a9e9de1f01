#pragma once

#include "nbits/capabilities.hpp"
#include "nbits/error.hpp"
#include "nbits/options.hpp"

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace nbits {

struct AllocationCounters {
    std::uint64_t allocations = 0;
    std::uint64_t frees = 0;
    std::uint64_t live() const { return allocations - frees; }
};

// One GPU: its primary context, one non-blocking stream (the default stream
// of every nbits call), the device capabilities, counted allocations, the JIT
// module cache, a stream-ordered scratch pool and the cuBLASLt handle.
// Thread-safe: any number of threads may use one runtime.
namespace ops {
struct LaunchPlan;
}

class CudaRuntime {
public:
    // Throws Error(NoDriver) without a driver, Error(NoDevice) without the
    // requested device, Error(UnsupportedDevice) for a compute capability 0.
    explicit CudaRuntime(const RuntimeOptions& options = {});
    ~CudaRuntime();
    CudaRuntime(const CudaRuntime&) = delete;
    CudaRuntime& operator=(const CudaRuntime&) = delete;

    int device() const;
    CUcontext context() const;
    CUstream stream() const;
    const Capabilities& capabilities() const;

    // Memory. `alloc_raw(0)` allocates one byte, as the original did.
    // Throws Error(OutOfMemory) when the device has no room.
    CUdeviceptr alloc_raw(std::size_t bytes);
    void free_raw(CUdeviceptr pointer);
    // Every allocation nbits makes on this runtime: alloc_raw, operator
    // workspaces and the scratch of each run.
    AllocationCounters counters() const;

    void htod(CUdeviceptr destination, const void* source, std::size_t bytes);   // synchronous
    void dtoh(void* destination, CUdeviceptr source, std::size_t bytes);         // synchronizes the stream first
    void dtod(CUdeviceptr destination, CUdeviceptr source, std::size_t bytes);   // synchronizes the stream first
    void dtod_async(CUdeviceptr destination, CUdeviceptr source, std::size_t bytes);  // ordered on the stream
    void memset_async(CUdeviceptr destination, std::uint8_t value, std::size_t bytes);
    void synchronize();

    // Compiles (or loads from the disk cache) and loads every kernel the
    // plans launch, each once, on up to `threads` threads at a time (0: one
    // per hardware thread), so that the first runs of those plans compile
    // nothing. For an engine's session start, with the plans of the nodes and
    // row counts it expects (MatMulNBits::plan). Throws the first compile or
    // load error once every thread has finished; what did load stays loaded.
    void prepare(const std::vector<const ops::LaunchPlan*>& plans, unsigned threads = 0);

    // nbits' own machinery (JIT, launches, pool, cuBLASLt): defined in the
    // library's sources, not part of the installed API.
    class Internals;
    Internals& internals() const { return *internals_; }

private:
    std::unique_ptr<Internals> internals_;
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

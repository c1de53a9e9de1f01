#include "nbits/runtime/cuda_runtime.hpp"

#include "nbits/cuda/driver.hpp"
#include "nbits/error.hpp"
#include "nbits/jit/include_dirs.hpp"

#include <cublasLt.h>
#include <fmt/format.h>

namespace nbits {
namespace {

int attribute(CUdevice device, CUdevice_attribute which)
{
    int value = 0;
    // A failed query reads as "reported nothing"; Capabilities::from applies the fallback.
    if (cuda::driver().device_get_attribute(&value, which, device) != CUDA_SUCCESS) {
        return 0;
    }
    return value;
}

}  // namespace

CudaRuntime::ScopedContext::ScopedContext(const CudaRuntime& runtime)
{
    const cuda::Driver& d = cuda::driver();
    CUcontext current = nullptr;
    d.ctx_get_current(&current);
    if (current != runtime.context_) {
        cuda::check(d.ctx_push_current(runtime.context_), "making the nbits CUDA context current");
        pushed_ = true;
    }
}

CudaRuntime::ScopedContext::~ScopedContext()
{
    if (pushed_) {
        CUcontext popped = nullptr;
        cuda::driver().ctx_pop_current(&popped);
    }
}

CudaRuntime::CudaRuntime(const RuntimeOptions& options) : ordinal_(options.device)
{
    const cuda::Driver& d = cuda::driver();
    int count = 0;
    cuda::check(d.device_get_count(&count), "counting CUDA devices");
    if (count == 0 || ordinal_ < 0 || ordinal_ >= count) {
        throw Error(ErrorKind::NoDevice,
                    fmt::format("CUDA device {} does not exist: the driver sees {} device(s). How to fix: pick an "
                                "ordinal below {}, or check CUDA_VISIBLE_DEVICES",
                                ordinal_, count, count));
    }
    cuda::check(d.device_get(&device_, ordinal_), "opening the CUDA device");

    DeviceAttributes attributes;
    char name[256] = {};
    if (d.device_get_name(name, sizeof(name), device_) == CUDA_SUCCESS) {
        attributes.name = name;
    }
    attributes.compute_major = attribute(device_, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    attributes.compute_minor = attribute(device_, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    attributes.max_threads_per_block = attribute(device_, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
    attributes.max_shared_memory_per_block = attribute(device_, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
    attributes.max_shared_memory_per_block_optin =
        attribute(device_, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    attributes.multiprocessor_count = attribute(device_, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    capabilities_ = Capabilities::from(attributes);

    cuda::check(d.primary_ctx_retain(&context_, device_), "retaining the primary CUDA context");
    try {
        ScopedContext scope(*this);
        // Non-blocking: the legacy NULL stream cannot be captured into a CUDA graph.
        cuda::check(d.stream_create(&stream_, CU_STREAM_NON_BLOCKING), "creating the nbits CUDA stream");
    } catch (...) {
        d.primary_ctx_release(device_);
        throw;
    }
    include_dirs_ = jit::discover_include_dirs();
    disk_cache_ = jit::open_disk_cache(options.disk_cache);
    modules_ = std::make_unique<ModuleCache>(capabilities_.compute_major, capabilities_.compute_minor,
                                             include_dirs_, options.granularity, jit::as_image_store(disk_cache_));
}

CudaRuntime::~CudaRuntime()
{
    const cuda::Driver& d = cuda::driver();
    {
        ScopedContext scope(*this);
        d.stream_synchronize(stream_);
        if (blas_ != nullptr) {
            cublasLtDestroy(blas_);
        }
        modules_.reset();
        d.stream_destroy(stream_);
    }
    d.primary_ctx_release(device_);
}

CUdeviceptr CudaRuntime::alloc_raw(std::size_t bytes)
{
    ScopedContext scope(*this);
    CUdeviceptr pointer = 0;
    const CUresult result = cuda::driver().mem_alloc(&pointer, bytes == 0 ? 1 : bytes);
    if (result != CUDA_SUCCESS) {
        throw Error(ErrorKind::Driver, fmt::format("allocating {} bytes of device memory on {} failed: {}", bytes,
                                                   capabilities_.name, cuda::describe(result)));
    }
    allocations_.fetch_add(1);
    return pointer;
}

void CudaRuntime::free_raw(CUdeviceptr pointer)
{
    if (pointer == 0) {
        return;
    }
    ScopedContext scope(*this);
    frees_.fetch_add(1);
    cuda::check(cuda::driver().mem_free(pointer), "freeing device memory");
}

AllocationCounters CudaRuntime::counters() const { return {allocations_.load(), frees_.load()}; }

void CudaRuntime::htod(CUdeviceptr destination, const void* source, std::size_t bytes)
{
    ScopedContext scope(*this);
    cuda::check(cuda::driver().memcpy_htod(destination, source, bytes), "copying host memory to the device");
}

void CudaRuntime::dtoh(void* destination, CUdeviceptr source, std::size_t bytes)
{
    ScopedContext scope(*this);
    cuda::check(cuda::driver().stream_synchronize(stream_), "waiting for the nbits stream before a device-to-host copy");
    cuda::check(cuda::driver().memcpy_dtoh(destination, source, bytes), "copying device memory to the host");
}

void CudaRuntime::dtod(CUdeviceptr destination, CUdeviceptr source, std::size_t bytes)
{
    ScopedContext scope(*this);
    cuda::check(cuda::driver().stream_synchronize(stream_), "waiting for the nbits stream before a device copy");
    cuda::check(cuda::driver().memcpy_dtod(destination, source, bytes), "copying device memory");
}

void CudaRuntime::dtod_async(CUdeviceptr destination, CUdeviceptr source, std::size_t bytes)
{
    ScopedContext scope(*this);
    cuda::check(cuda::driver().memcpy_dtod_async(destination, source, bytes, stream_),
                "queueing a device copy on the nbits stream");
}

void CudaRuntime::memset_async(CUdeviceptr destination, std::uint8_t value, std::size_t bytes)
{
    ScopedContext scope(*this);
    cuda::check(cuda::driver().memset_d8_async(destination, value, bytes, stream_),
                "queueing a device memset on the nbits stream");
}

void CudaRuntime::synchronize()
{
    ScopedContext scope(*this);
    cuda::check(cuda::driver().stream_synchronize(stream_), "synchronizing the nbits stream");
}

CUfunction CudaRuntime::function(const jit::KernelSource& source, std::string_view entry)
{
    ScopedContext scope(*this);
    return modules_->function(source, entry);
}

void CudaRuntime::require_nvrtc_half_headers(std::string_view op) const
{
    if (include_dirs_.empty()) {
        throw Error(ErrorKind::MissingHeaders, jit::missing_half_headers_message(std::string(op)));
    }
}

void CudaRuntime::configure_dynamic_shared_memory(CUfunction function, std::uint32_t requested, std::string_view what)
{
    ScopedContext scope(*this);
    int static_bytes = 0;
    cuda::check(cuda::driver().func_get_attribute(&static_bytes, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, function),
                "reading a kernel's static shared memory size");
    const SharedMemoryAction action = decide_dynamic_shared_memory(
        requested, static_cast<std::uint32_t>(static_bytes), capabilities_, std::string(what));
    if (action == SharedMemoryAction::RaiseLimit) {
        cuda::check(cuda::driver().func_set_attribute(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                      static_cast<int>(requested)),
                    fmt::format("raising the dynamic shared memory limit of {} to {} bytes", what, requested));
    }
}

void CudaRuntime::launch(CUfunction function, const LaunchConfig& config, KernelArgs& args, std::string_view what)
{
    ScopedContext scope(*this);
    const CUresult result = cuda::driver().launch_kernel(
        function, config.grid.x, config.grid.y, config.grid.z, config.block.x, config.block.y, config.block.z,
        config.dynamic_shared_bytes, stream_, args.pointers(), nullptr);
    if (result != CUDA_SUCCESS) {
        throw Error(ErrorKind::Driver,
                    fmt::format("launch {} (grid {}x{}x{}, block {}x{}x{}, {} bytes dynamic shared memory) failed: {}",
                                what, config.grid.x, config.grid.y, config.grid.z, config.block.x, config.block.y,
                                config.block.z, config.dynamic_shared_bytes, cuda::describe(result)));
    }
}

cublasLtContext* CudaRuntime::blas()
{
    std::lock_guard<std::mutex> lock(blas_mutex_);
    if (blas_ == nullptr) {
        ScopedContext scope(*this);
        const cublasStatus_t status = cublasLtCreate(&blas_);
        if (status != CUBLAS_STATUS_SUCCESS) {
            blas_ = nullptr;
            throw Error(ErrorKind::Blas, fmt::format("creating the cuBLASLt handle failed: {} ({})",
                                                     cublasLtGetStatusName(status), cublasLtGetStatusString(status)));
        }
    }
    return blas_;
}

DeviceBuffer::DeviceBuffer(CudaRuntime& runtime, std::size_t bytes)
    : runtime_(&runtime), pointer_(runtime.alloc_raw(bytes)), bytes_(bytes)
{
}

DeviceBuffer::~DeviceBuffer() { reset(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : runtime_(other.runtime_), pointer_(other.pointer_), bytes_(other.bytes_)
{
    other.pointer_ = 0;
    other.bytes_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept
{
    if (this != &other) {
        reset();
        runtime_ = other.runtime_;
        pointer_ = other.pointer_;
        bytes_ = other.bytes_;
        other.pointer_ = 0;
        other.bytes_ = 0;
    }
    return *this;
}

void DeviceBuffer::reset()
{
    if (pointer_ != 0 && runtime_ != nullptr) {
        try {
            runtime_->free_raw(pointer_);
        } catch (...) {
            // A destructor cannot report; a failed free means the context is already broken.
        }
    }
    pointer_ = 0;
    bytes_ = 0;
}

}  // namespace nbits

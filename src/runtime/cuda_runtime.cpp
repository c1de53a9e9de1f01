#include "runtime/internals.hpp"

#include "cuda/driver.hpp"
#include "jit/environment.hpp"
#include "nbits/error.hpp"

#include "kernels.hpp"
#include "nbits/launch_plan.hpp"

#include <cublasLt.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <exception>
#include <limits>
#include <mutex>
#include <set>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace nbits {
namespace {

// The pool keeps up to this much freed scratch mapped, so that a steady
// stream of runs does not return memory to the driver and map it again.
constexpr std::uint64_t kPoolRetainedBytes = 256ull << 20;

int attribute(CUdevice device, CUdevice_attribute which)
{
    int value = 0;
    // A failed query reads as "reported nothing"; Capabilities::from applies the fallback.
    if (cuda::driver().device_get_attribute(&value, which, device) != CUDA_SUCCESS) {
        return 0;
    }
    return value;
}

[[noreturn]] void throw_allocation_failure(CUresult result, std::size_t bytes, const Capabilities& device)
{
    if (result == CUDA_ERROR_OUT_OF_MEMORY) {
        throw Error(ErrorKind::OutOfMemory,
                    fmt::format("allocating {} bytes of device memory on {} failed: the device is out of memory. "
                                "How to fix: free device memory, run smaller batches, or pass a workspace in "
                                "RunOptions",
                                bytes, device.name));
    }
    throw Error(ErrorKind::Driver, fmt::format("allocating {} bytes of device memory on {} failed: {}", bytes,
                                               device.name, cuda::describe(result)));
}

CUmemoryPool create_pool(CUdevice device)
{
    const cuda::Driver& d = cuda::driver();
    if (attribute(device, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED) == 0) {
        return nullptr;
    }
    CUmemPoolProps properties{};
    properties.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    properties.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    properties.location.id = device;
    CUmemoryPool pool = nullptr;
    if (d.mem_pool_create(&pool, &properties) != CUDA_SUCCESS) {
        return nullptr;
    }
    cuuint64_t retained = kPoolRetainedBytes;
    d.mem_pool_set_attribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &retained);
    return pool;
}

// PTX of an empty kernel, which the driver compiles for any GPU of compute
// capability 9.0 and newer: what cuOccupancyMaxActiveClusters needs to count
// the clusters that the GPU's GPCs run at once.
constexpr char kClusterProbePtx[] =
    ".version 7.8\n.target sm_90\n.address_size 64\n.visible .entry nbits_cluster_probe()\n{\n\tret;\n}\n";

// Clusters of 2, 3 and 4 CTAs that run at once one CTA an SM (each CTA asking
// for all the shared memory a block may opt into), in the current context;
// zeros where the GPU has no clusters or the driver does not say.
std::array<int, 3> count_clusters(const DeviceAttributes& attributes)
{
    std::array<int, 3> counts{};
    const int shared = attributes.max_shared_memory_per_block_optin;
    if (attributes.compute_major < 9 || shared <= 0 || attributes.multiprocessor_count <= 0) {
        return counts;
    }
    const cuda::Driver& d = cuda::driver();
    CUmodule module = nullptr;
    if (d.module_load_data(&module, kClusterProbePtx) != CUDA_SUCCESS) {
        return counts;
    }
    CUfunction function = nullptr;
    if (d.module_get_function(&function, module, "nbits_cluster_probe") == CUDA_SUCCESS &&
        d.func_set_attribute(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared) == CUDA_SUCCESS) {
        for (unsigned size = 2; size <= 4; ++size) {
            CUlaunchAttribute cluster{};
            cluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
            cluster.value.clusterDim.x = size;
            cluster.value.clusterDim.y = 1;
            cluster.value.clusterDim.z = 1;
            CUlaunchConfig config{};
            config.gridDimX = size * static_cast<unsigned>(attributes.multiprocessor_count);
            config.gridDimY = 1;
            config.gridDimZ = 1;
            config.blockDimX = 128;
            config.blockDimY = 1;
            config.blockDimZ = 1;
            config.sharedMemBytes = static_cast<unsigned>(shared);
            config.attrs = &cluster;
            config.numAttrs = 1;
            int clusters = 0;
            if (d.occupancy_max_active_clusters(&clusters, function, &config) == CUDA_SUCCESS) {
                counts[size - 2] = clusters;
            }
        }
    }
    d.module_unload(module);
    return counts;
}

// count_clusters once a process and device: the counts depend on the GPU and
// the driver only, and each count loads a module (10-13 ms with the driver's
// JIT cache off), which engines that create a runtime per session or thread
// would otherwise pay every time. A count that came back empty is not kept,
// so that a later runtime asks again.
std::array<int, 3> clusters_of(CUdevice device, const DeviceAttributes& attributes)
{
    static std::mutex mutex;
    static std::vector<std::pair<CUdevice, std::array<int, 3>>> counted;
    const std::lock_guard<std::mutex> lock(mutex);
    for (const auto& [known, counts] : counted) {
        if (known == device) {
            return counts;
        }
    }
    const std::array<int, 3> counts = count_clusters(attributes);
    if (std::any_of(counts.begin(), counts.end(), [](int count) { return count > 0; })) {
        counted.emplace_back(device, counts);
    }
    return counts;
}

}  // namespace

CudaRuntime::Internals::ScopedContext::ScopedContext(const Internals& runtime)
{
    const cuda::Driver& d = cuda::driver();
    CUcontext current = nullptr;
    d.ctx_get_current(&current);
    if (current != runtime.context_) {
        cuda::check(d.ctx_push_current(runtime.context_), "making the nbits CUDA context current");
        pushed_ = true;
    }
}

CudaRuntime::Internals::ScopedContext::~ScopedContext()
{
    if (pushed_) {
        CUcontext popped = nullptr;
        cuda::driver().ctx_pop_current(&popped);
    }
}

CudaRuntime::Internals::Internals(const RuntimeOptions& options) : ordinal_(options.device)
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
    attributes.max_threads_per_multiprocessor = attribute(device_, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
    attributes.max_shared_memory_per_block = attribute(device_, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
    attributes.max_shared_memory_per_block_optin =
        attribute(device_, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    attributes.multiprocessor_count = attribute(device_, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    attributes.memory_clock_khz = attribute(device_, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE);
    attributes.memory_bus_width_bits = attribute(device_, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
    std::size_t total_memory = 0;
    if (d.device_total_mem(&total_memory, device_) == CUDA_SUCCESS) {
        attributes.total_memory_bytes = total_memory;
    }
    capabilities_ = Capabilities::from(attributes);

    cuda::check(d.primary_ctx_retain(&context_, device_), "retaining the primary CUDA context");
    try {
        ScopedContext scope(*this);
        attributes.clusters_a_cta_an_sm = clusters_of(device_, attributes);
        capabilities_ = Capabilities::from(attributes);
        // Non-blocking: the legacy NULL stream cannot be captured into a CUDA graph.
        cuda::check(d.stream_create(&stream_, CU_STREAM_NON_BLOCKING), "creating the nbits CUDA stream");
        pool_ = create_pool(device_);
        const std::optional<std::string> synchronous = jit::process_environment()("NBITS_SYNC_LAUNCHES");
        synchronous_launches_ = synchronous && *synchronous != "0" && !synchronous->empty();
        disk_cache_ = jit::open_disk_cache(options.disk_cache);
        modules_ = std::make_unique<ModuleCache>(capabilities_.compute_major, capabilities_.compute_minor,
                                                 options.granularity, jit::as_image_store(disk_cache_),
                                                 options.jit_image);
    } catch (...) {
        if (stream_ != nullptr) {
            d.stream_destroy(stream_);
        }
        if (pool_ != nullptr) {
            d.mem_pool_destroy(pool_);
        }
        d.primary_ctx_release(device_);
        throw;
    }
}

CudaRuntime::Internals::~Internals()
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
        if (pool_ != nullptr) {
            // Scratch released on callers' streams must be back in the pool first.
            d.ctx_synchronize(context_);
            d.mem_pool_destroy(pool_);
        }
    }
    d.primary_ctx_release(device_);
}

CUstream CudaRuntime::Internals::stream_for(CUstream requested) const
{
    if (requested == nullptr) {
        return stream_;
    }
    if (requested == stream_) {
        return requested;
    }
    CUcontext owner = nullptr;
    CUgreenCtx green = nullptr;
    const CUresult result = cuda::driver().stream_get_ctx(requested, &owner, &green);
    if (result != CUDA_SUCCESS || owner != context_) {
        throw Error(ErrorKind::InvalidArgument,
                    fmt::format("RunOptions::stream {} is not a stream of device {}'s primary context ({}). Why: "
                                "nbits launches into the runtime's context, and a stream of another context cannot "
                                "order them. How to fix: create the stream in the primary context of device {} "
                                "(cudaSetDevice({}) then cudaStreamCreate), or pass nullptr for the runtime's stream",
                                static_cast<const void*>(requested), ordinal_,
                                result == CUDA_SUCCESS ? "it belongs to another context" : cuda::describe(result),
                                ordinal_, ordinal_));
    }
    return requested;
}

void CudaRuntime::Internals::set_allocation_budget(std::optional<std::uint64_t> allocations)
{
    budget_.store(allocations ? static_cast<std::int64_t>(*allocations) : -1);
}

void CudaRuntime::Internals::take_allocation(std::size_t bytes)
{
    std::int64_t left = budget_.load();
    while (left >= 0) {
        if (left == 0) {
            throw_allocation_failure(CUDA_ERROR_OUT_OF_MEMORY, bytes, capabilities_);
        }
        if (budget_.compare_exchange_weak(left, left - 1)) {
            break;
        }
    }
}

CUdeviceptr CudaRuntime::Internals::allocate(std::size_t bytes)
{
    take_allocation(bytes);
    ScopedContext scope(*this);
    CUdeviceptr pointer = 0;
    const CUresult result = cuda::driver().mem_alloc(&pointer, bytes == 0 ? 1 : bytes);
    if (result != CUDA_SUCCESS) {
        throw_allocation_failure(result, bytes, capabilities_);
    }
    allocations_.fetch_add(1);
    return pointer;
}

void CudaRuntime::Internals::release(CUdeviceptr pointer)
{
    if (pointer == 0) {
        return;
    }
    ScopedContext scope(*this);
    frees_.fetch_add(1);
    cuda::check(cuda::driver().mem_free(pointer), "freeing device memory");
}

CUdeviceptr CudaRuntime::Internals::allocate_async(std::size_t bytes, CUstream stream)
{
    if (pool_ == nullptr) {
        return allocate(bytes);  // a device without memory pools: release_async waits instead
    }
    take_allocation(bytes);
    ScopedContext scope(*this);
    CUdeviceptr pointer = 0;
    const CUresult result = cuda::driver().mem_alloc_from_pool_async(&pointer, bytes == 0 ? 1 : bytes, pool_, stream);
    if (result != CUDA_SUCCESS) {
        throw_allocation_failure(result, bytes, capabilities_);
    }
    allocations_.fetch_add(1);
    return pointer;
}

void CudaRuntime::Internals::release_async(CUdeviceptr pointer, CUstream stream)
{
    if (pointer == 0) {
        return;
    }
    if (pool_ == nullptr) {
        ScopedContext scope(*this);
        cuda::check(cuda::driver().stream_synchronize(stream), "waiting for the stream before freeing its scratch");
        release(pointer);
        return;
    }
    ScopedContext scope(*this);
    frees_.fetch_add(1);
    cuda::check(cuda::driver().mem_free_async(pointer, stream), "releasing scratch to the nbits pool");
}

CUfunction CudaRuntime::Internals::function(const jit::KernelSource& source, std::string_view entry,
                                            const jit::Defines& defines, bool arch_specific)
{
    ScopedContext scope(*this);
    return modules_->function(source, entry, defines, arch_specific);
}

void CudaRuntime::Internals::configure_dynamic_shared_memory(CUfunction function, std::uint32_t requested,
                                                             std::string_view what)
{
    std::lock_guard<std::mutex> lock(shared_memory_mutex_);
    const auto raised = raised_shared_memory_.find(function);
    if (raised != raised_shared_memory_.end() && raised->second >= requested) {
        return;
    }
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
        raised_shared_memory_[function] = requested;
    }
}

CUfunction CudaRuntime::Internals::step_function(const ops::KernelStep& step, const jit::KernelSource* source)
{
    const CUfunction loaded = function(source != nullptr ? *source : kernels::source(step.source), step.entry,
                                       step.defines, step.arch_specific);
    if (step.configure_shared_memory) {
        configure_dynamic_shared_memory(loaded, step.config.dynamic_shared_bytes, step.what);
    }
    return loaded;
}

CUtensorMap encode_tensor_map(const ops::TensorMapArg& map, CUdeviceptr base, std::string_view what)
{
    using Element = ops::TensorMapArg::Element;
    const CUtensorMapDataType type = map.element == Element::UInt8     ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                     : map.element == Element::Float16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                                       : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    const cuuint64_t dims[2] = {map.width, map.rows};
    const cuuint64_t strides[1] = {map.row_bytes};
    const cuuint32_t box[2] = {map.box_width, map.box_rows};
    const cuuint32_t element_strides[2] = {1, 1};
    CUtensorMap encoded{};
    const CUresult result = cuda::driver().tensor_map_encode_tiled(
        &encoded, type, 2, reinterpret_cast<void*>(base), dims, strides, box, element_strides,
        CU_TENSOR_MAP_INTERLEAVE_NONE, map.swizzle_128b ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
        CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (result != CUDA_SUCCESS) {
        throw Error(ErrorKind::Driver,
                    fmt::format("{}: cuTensorMapEncodeTiled refused the tensor map of a {} x {} tensor at {:#x} "
                                "(rows {} bytes apart, box {} x {}): {}",
                                what, map.rows, map.width, base, map.row_bytes, map.box_rows, map.box_width,
                                cuda::describe(result)));
    }
    return encoded;
}

void CudaRuntime::Internals::launch(CUfunction function, const LaunchConfig& config, KernelArgs& args,
                                    CUstream stream, std::string_view what)
{
    ScopedContext scope(*this);
    CUresult result = CUDA_SUCCESS;
    // Drivers before CUDA 12.3 cannot capture programmatic launches into a
    // graph; there the kernel's griddepcontrol.wait meets a plain stream
    // dependency and returns at once.
    if (config.programmatic_dependent && cuda::driver().version >= 12030) {
        CUlaunchAttribute attribute{};
        attribute.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attribute.value.programmaticStreamSerializationAllowed = 1;
        CUlaunchConfig launch{};
        launch.gridDimX = config.grid.x;
        launch.gridDimY = config.grid.y;
        launch.gridDimZ = config.grid.z;
        launch.blockDimX = config.block.x;
        launch.blockDimY = config.block.y;
        launch.blockDimZ = config.block.z;
        launch.sharedMemBytes = config.dynamic_shared_bytes;
        launch.hStream = stream;
        launch.attrs = &attribute;
        launch.numAttrs = 1;
        result = cuda::driver().launch_kernel_ex(&launch, function, args.pointers(), nullptr);
    } else {
        result = cuda::driver().launch_kernel(function, config.grid.x, config.grid.y, config.grid.z, config.block.x,
                                              config.block.y, config.block.z, config.dynamic_shared_bytes, stream,
                                              args.pointers(), nullptr);
    }
    auto fail = [&](const char* when, CUresult error) {
        throw Error(ErrorKind::Driver,
                    fmt::format("launch {} (grid {}x{}x{}, block {}x{}x{}, {} bytes dynamic shared memory) {}: {}",
                                what, config.grid.x, config.grid.y, config.grid.z, config.block.x, config.block.y,
                                config.block.z, config.dynamic_shared_bytes, when, cuda::describe(error)));
    };
    if (result != CUDA_SUCCESS) {
        fail("failed", result);
    }
    if (synchronous_launches_) {
        CUstreamCaptureStatus capturing = CU_STREAM_CAPTURE_STATUS_NONE;
        cuda::driver().stream_is_capturing(stream, &capturing);
        if (capturing == CU_STREAM_CAPTURE_STATUS_NONE) {
            const CUresult ran = cuda::driver().stream_synchronize(stream);
            if (ran != CUDA_SUCCESS) {
                fail("faulted while running (NBITS_SYNC_LAUNCHES)", ran);
            }
        }
    }
}

cublasLtContext* CudaRuntime::Internals::blas()
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

CudaRuntime::CudaRuntime(const RuntimeOptions& options) : internals_(std::make_unique<Internals>(options)) {}

CudaRuntime::~CudaRuntime() = default;

int CudaRuntime::device() const { return internals_->ordinal(); }
CUcontext CudaRuntime::context() const { return internals_->context(); }
CUstream CudaRuntime::stream() const { return internals_->stream(); }
const Capabilities& CudaRuntime::capabilities() const { return internals_->capabilities(); }

CUdeviceptr CudaRuntime::alloc_raw(std::size_t bytes) { return internals_->allocate(bytes); }
void CudaRuntime::free_raw(CUdeviceptr pointer) { internals_->release(pointer); }
AllocationCounters CudaRuntime::counters() const { return internals_->counters(); }

void CudaRuntime::prepare(const std::vector<const ops::LaunchPlan*>& plans, unsigned threads)
{
    std::vector<const ops::KernelStep*> steps;
    std::set<std::string> seen;
    for (const ops::LaunchPlan* plan : plans) {
        if (plan == nullptr) {
            continue;
        }
        for (const ops::PlanStep& planned : plan->steps) {
            const auto* step = std::get_if<ops::KernelStep>(&planned);
            if (step == nullptr) {
                continue;
            }
            std::string key = step->source + '\n' + step->entry + (step->arch_specific ? "\na" : "\n");
            for (const std::string& define : step->defines) {
                key.append("\n").append(define);
            }
            if (seen.insert(std::move(key)).second) {
                steps.push_back(step);
            }
        }
    }
    const unsigned wanted = threads != 0 ? threads : std::max(1u, std::thread::hardware_concurrency());
    const std::size_t count = std::min<std::size_t>(wanted, steps.size());
    std::atomic<std::size_t> next{0};
    std::mutex failure_mutex;
    std::exception_ptr failure;
    auto work = [&] {
        for (std::size_t i = next++; i < steps.size(); i = next++) {
            try {
                internals_->step_function(*steps[i]);
            } catch (...) {
                const std::lock_guard<std::mutex> lock(failure_mutex);
                if (!failure) {
                    failure = std::current_exception();
                }
            }
        }
    };
    std::vector<std::thread> pool;
    for (std::size_t t = 1; t < count; ++t) {
        try {
            pool.emplace_back(work);
        } catch (const std::system_error&) {
            break;  // no more threads: the ones running and this one take the rest
        }
    }
    work();
    for (std::thread& thread : pool) {
        thread.join();
    }
    if (failure) {
        std::rethrow_exception(failure);
    }
}

void CudaRuntime::htod(CUdeviceptr destination, const void* source, std::size_t bytes)
{
    Internals::ScopedContext scope(*internals_);
    cuda::check(cuda::driver().memcpy_htod(destination, source, bytes), "copying host memory to the device");
}

void CudaRuntime::dtoh(void* destination, CUdeviceptr source, std::size_t bytes)
{
    Internals::ScopedContext scope(*internals_);
    cuda::check(cuda::driver().stream_synchronize(stream()), "waiting for the nbits stream before a device-to-host copy");
    cuda::check(cuda::driver().memcpy_dtoh(destination, source, bytes), "copying device memory to the host");
}

void CudaRuntime::dtod(CUdeviceptr destination, CUdeviceptr source, std::size_t bytes)
{
    Internals::ScopedContext scope(*internals_);
    cuda::check(cuda::driver().stream_synchronize(stream()), "waiting for the nbits stream before a device copy");
    cuda::check(cuda::driver().memcpy_dtod(destination, source, bytes), "copying device memory");
}

void CudaRuntime::dtod_async(CUdeviceptr destination, CUdeviceptr source, std::size_t bytes)
{
    Internals::ScopedContext scope(*internals_);
    cuda::check(cuda::driver().memcpy_dtod_async(destination, source, bytes, stream()),
                "queueing a device copy on the nbits stream");
}

void CudaRuntime::memset_async(CUdeviceptr destination, std::uint8_t value, std::size_t bytes)
{
    Internals::ScopedContext scope(*internals_);
    cuda::check(cuda::driver().memset_d8_async(destination, value, bytes, stream()),
                "queueing a device memset on the nbits stream");
}

void CudaRuntime::synchronize()
{
    Internals::ScopedContext scope(*internals_);
    cuda::check(cuda::driver().stream_synchronize(stream()), "synchronizing the nbits stream");
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

#include "cuda/driver.hpp"

#include "nbits/error.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <mutex>

namespace nbits::cuda {
namespace {

constexpr const char* kLibrary = "libcuda.so.1";
constexpr const char* kInstallHint =
    "How to fix: install the NVIDIA driver (it provides libcuda.so.1) on a machine with an "
    "NVIDIA GPU, or make its directory visible through LD_LIBRARY_PATH";

using GetProcAddress = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

struct Loaded {
    Driver api;
    std::string failure;  // empty when loaded
};

template <typename Fn>
bool resolve(GetProcAddress get, const char* symbol, Fn& slot, std::string& failure)
{
    void* pointer = nullptr;
    CUdriverProcAddressQueryResult status{};
    const CUresult result = get(symbol, &pointer, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    if (result != CUDA_SUCCESS || pointer == nullptr || status != CU_GET_PROC_ADDRESS_SUCCESS) {
        failure = fmt::format(
            "the CUDA driver has no usable '{}' (status {}). Why: the installed driver is older than the "
            "CUDA {}.{} API nbits was built against. How to fix: upgrade the NVIDIA driver",
            symbol, static_cast<int>(status), CUDA_VERSION / 1000, (CUDA_VERSION % 1000) / 10);
        return false;
    }
    slot = reinterpret_cast<Fn>(pointer);
    return true;
}

Loaded load()
{
    Loaded loaded;
    // Never closed: the driver stays mapped for the life of the process, as
    // contexts and modules created through it may outlive any one owner.
    void* handle = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
        const char* why = dlerror();
        loaded.failure = fmt::format("no CUDA driver was found: {} could not be loaded ({}). {}", kLibrary,
                                     why ? why : "unknown reason", kInstallHint);
        return loaded;
    }
    auto get = reinterpret_cast<GetProcAddress>(dlsym(handle, "cuGetProcAddress_v2"));
    if (get == nullptr) {
        loaded.failure = fmt::format(
            "the CUDA driver in {} is too old: it lacks cuGetProcAddress_v2 (CUDA 12.0). How to fix: upgrade "
            "the NVIDIA driver",
            kLibrary);
        return loaded;
    }
    Driver& d = loaded.api;
    std::string& f = loaded.failure;
    // clang-format off
    const bool ok =
        resolve(get, "cuInit", d.init, f) &&
        resolve(get, "cuDriverGetVersion", d.driver_get_version, f) &&
        resolve(get, "cuGetErrorName", d.get_error_name, f) &&
        resolve(get, "cuGetErrorString", d.get_error_string, f) &&
        resolve(get, "cuDeviceGetCount", d.device_get_count, f) &&
        resolve(get, "cuDeviceGet", d.device_get, f) &&
        resolve(get, "cuDeviceGetName", d.device_get_name, f) &&
        resolve(get, "cuDeviceGetAttribute", d.device_get_attribute, f) &&
        resolve(get, "cuDeviceTotalMem", d.device_total_mem, f) &&
        resolve(get, "cuDevicePrimaryCtxRetain", d.primary_ctx_retain, f) &&
        resolve(get, "cuDevicePrimaryCtxRelease", d.primary_ctx_release, f) &&
        resolve(get, "cuCtxSetCurrent", d.ctx_set_current, f) &&
        resolve(get, "cuCtxGetCurrent", d.ctx_get_current, f) &&
        resolve(get, "cuCtxPushCurrent", d.ctx_push_current, f) &&
        resolve(get, "cuCtxPopCurrent", d.ctx_pop_current, f) &&
        resolve(get, "cuCtxSynchronize", d.ctx_synchronize, f) &&
        resolve(get, "cuCtxCreate", d.ctx_create, f) &&
        resolve(get, "cuCtxDestroy", d.ctx_destroy, f) &&
        resolve(get, "cuStreamCreate", d.stream_create, f) &&
        resolve(get, "cuStreamDestroy", d.stream_destroy, f) &&
        resolve(get, "cuStreamSynchronize", d.stream_synchronize, f) &&
        resolve(get, "cuStreamBeginCapture", d.stream_begin_capture, f) &&
        resolve(get, "cuStreamEndCapture", d.stream_end_capture, f) &&
        resolve(get, "cuStreamIsCapturing", d.stream_is_capturing, f) &&
        resolve(get, "cuStreamGetCtx", d.stream_get_ctx, f) &&
        resolve(get, "cuStreamWaitEvent", d.stream_wait_event, f) &&
        resolve(get, "cuMemAlloc", d.mem_alloc, f) &&
        resolve(get, "cuMemFree", d.mem_free, f) &&
        resolve(get, "cuMemGetInfo", d.mem_get_info, f) &&
        resolve(get, "cuMemcpyHtoD", d.memcpy_htod, f) &&
        resolve(get, "cuMemcpyDtoH", d.memcpy_dtoh, f) &&
        resolve(get, "cuMemcpyDtoD", d.memcpy_dtod, f) &&
        resolve(get, "cuMemcpyDtoDAsync", d.memcpy_dtod_async, f) &&
        resolve(get, "cuMemsetD8", d.memset_d8, f) &&
        resolve(get, "cuMemsetD8Async", d.memset_d8_async, f) &&
        resolve(get, "cuMemcpyDtoHAsync", d.memcpy_dtoh_async, f) &&
        resolve(get, "cuMemPoolCreate", d.mem_pool_create, f) &&
        resolve(get, "cuMemPoolDestroy", d.mem_pool_destroy, f) &&
        resolve(get, "cuMemPoolSetAttribute", d.mem_pool_set_attribute, f) &&
        resolve(get, "cuMemAllocFromPoolAsync", d.mem_alloc_from_pool_async, f) &&
        resolve(get, "cuMemFreeAsync", d.mem_free_async, f) &&
        resolve(get, "cuModuleLoadData", d.module_load_data, f) &&
        resolve(get, "cuModuleUnload", d.module_unload, f) &&
        resolve(get, "cuModuleGetFunction", d.module_get_function, f) &&
        resolve(get, "cuFuncGetAttribute", d.func_get_attribute, f) &&
        resolve(get, "cuFuncSetAttribute", d.func_set_attribute, f) &&
        resolve(get, "cuLaunchKernel", d.launch_kernel, f) &&
        resolve(get, "cuLaunchKernelEx", d.launch_kernel_ex, f) &&
        resolve(get, "cuTensorMapEncodeTiled", d.tensor_map_encode_tiled, f) &&
        resolve(get, "cuOccupancyMaxActiveClusters", d.occupancy_max_active_clusters, f) &&
        resolve(get, "cuEventCreate", d.event_create, f) &&
        resolve(get, "cuEventDestroy", d.event_destroy, f) &&
        resolve(get, "cuEventRecord", d.event_record, f) &&
        resolve(get, "cuEventSynchronize", d.event_synchronize, f) &&
        resolve(get, "cuEventElapsedTime", d.event_elapsed_time, f) &&
        resolve(get, "cuGraphInstantiateWithFlags", d.graph_instantiate, f) &&
        resolve(get, "cuGraphLaunch", d.graph_launch, f) &&
        resolve(get, "cuGraphDestroy", d.graph_destroy, f) &&
        resolve(get, "cuGraphExecDestroy", d.graph_exec_destroy, f);
    // clang-format on
    if (!ok) {
        return loaded;
    }
    const CUresult init = d.init(0);
    if (init != CUDA_SUCCESS) {
        const char* name = nullptr;
        d.get_error_name(init, &name);
        loaded.failure = fmt::format(
            "the CUDA driver failed to initialize: cuInit returned {}. Why: no NVIDIA GPU is visible to this "
            "process, or the kernel module does not match libcuda.so.1. How to fix: check `nvidia-smi` and "
            "CUDA_VISIBLE_DEVICES",
            name ? name : std::to_string(static_cast<int>(init)));
        return loaded;
    }
    d.driver_get_version(&d.version);
    return loaded;
}

const Loaded& loaded()
{
    static const Loaded instance = load();
    return instance;
}

}  // namespace

const Driver& driver()
{
    const Loaded& l = loaded();
    if (!l.failure.empty()) {
        throw Error(ErrorKind::NoDriver, l.failure);
    }
    return l.api;
}

bool driver_available(std::string* reason)
{
    const Loaded& l = loaded();
    if (reason != nullptr) {
        *reason = l.failure;
    }
    return l.failure.empty();
}

std::string describe(CUresult result)
{
    const Loaded& l = loaded();
    const char* name = nullptr;
    const char* text = nullptr;
    if (l.failure.empty()) {
        l.api.get_error_name(result, &name);
        l.api.get_error_string(result, &text);
    }
    return fmt::format("{} ({})", name ? name : fmt::format("CUresult {}", static_cast<int>(result)),
                       text ? text : "no description");
}

void check(CUresult result, std::string_view what)
{
    if (result != CUDA_SUCCESS) {
        throw Error(ErrorKind::Driver, fmt::format("{} failed: {}", what, describe(result)));
    }
}

}  // namespace nbits::cuda

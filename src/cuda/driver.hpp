#pragma once

#include <cuda.h>

#include <string>
#include <string_view>

namespace nbits::cuda {

// The CUDA driver API, resolved at run time from libcuda.so.1 through
// cuGetProcAddress. Nothing links against libcuda, so a binary starts on a
// machine without a driver and only the first use of `driver()` fails there.
struct Driver {
    int version = 0;  // cuDriverGetVersion, e.g. 13000

    decltype(&::cuInit) init = nullptr;
    decltype(&::cuDriverGetVersion) driver_get_version = nullptr;
    decltype(&::cuGetErrorName) get_error_name = nullptr;
    decltype(&::cuGetErrorString) get_error_string = nullptr;

    decltype(&::cuDeviceGetCount) device_get_count = nullptr;
    decltype(&::cuDeviceGet) device_get = nullptr;
    decltype(&::cuDeviceGetName) device_get_name = nullptr;
    decltype(&::cuDeviceGetAttribute) device_get_attribute = nullptr;
    decltype(&::cuDeviceTotalMem) device_total_mem = nullptr;
    decltype(&::cuDevicePrimaryCtxRetain) primary_ctx_retain = nullptr;
    decltype(&::cuDevicePrimaryCtxRelease) primary_ctx_release = nullptr;

    decltype(&::cuCtxSetCurrent) ctx_set_current = nullptr;
    decltype(&::cuCtxGetCurrent) ctx_get_current = nullptr;
    decltype(&::cuCtxPushCurrent) ctx_push_current = nullptr;
    decltype(&::cuCtxPopCurrent) ctx_pop_current = nullptr;
    // The CUDA 13 ABI of these names, as cuGetProcAddress returns them for this toolkit's version.
    decltype(&::cuCtxSynchronize_v2) ctx_synchronize = nullptr;
    decltype(&::cuCtxCreate) ctx_create = nullptr;
    decltype(&::cuCtxDestroy) ctx_destroy = nullptr;

    decltype(&::cuStreamCreate) stream_create = nullptr;
    decltype(&::cuStreamDestroy) stream_destroy = nullptr;
    decltype(&::cuStreamSynchronize) stream_synchronize = nullptr;
    decltype(&::cuStreamBeginCapture) stream_begin_capture = nullptr;
    decltype(&::cuStreamEndCapture) stream_end_capture = nullptr;
    decltype(&::cuStreamIsCapturing) stream_is_capturing = nullptr;
    decltype(&::cuStreamGetCtx_v2) stream_get_ctx = nullptr;
    decltype(&::cuStreamWaitEvent) stream_wait_event = nullptr;

    decltype(&::cuMemAlloc) mem_alloc = nullptr;
    decltype(&::cuMemFree) mem_free = nullptr;
    decltype(&::cuMemGetInfo) mem_get_info = nullptr;
    decltype(&::cuMemcpyHtoD) memcpy_htod = nullptr;
    decltype(&::cuMemcpyDtoH) memcpy_dtoh = nullptr;
    decltype(&::cuMemcpyDtoD) memcpy_dtod = nullptr;
    decltype(&::cuMemcpyDtoDAsync) memcpy_dtod_async = nullptr;
    decltype(&::cuMemsetD8) memset_d8 = nullptr;
    decltype(&::cuMemsetD8Async) memset_d8_async = nullptr;
    decltype(&::cuMemcpyDtoHAsync) memcpy_dtoh_async = nullptr;

    decltype(&::cuMemPoolCreate) mem_pool_create = nullptr;
    decltype(&::cuMemPoolDestroy) mem_pool_destroy = nullptr;
    decltype(&::cuMemPoolSetAttribute) mem_pool_set_attribute = nullptr;
    decltype(&::cuMemAllocFromPoolAsync) mem_alloc_from_pool_async = nullptr;
    decltype(&::cuMemFreeAsync) mem_free_async = nullptr;

    decltype(&::cuModuleLoadData) module_load_data = nullptr;
    decltype(&::cuModuleUnload) module_unload = nullptr;
    decltype(&::cuModuleGetFunction) module_get_function = nullptr;
    decltype(&::cuFuncGetAttribute) func_get_attribute = nullptr;
    decltype(&::cuFuncSetAttribute) func_set_attribute = nullptr;
    decltype(&::cuLaunchKernel) launch_kernel = nullptr;
    decltype(&::cuLaunchKernelEx) launch_kernel_ex = nullptr;
    decltype(&::cuTensorMapEncodeTiled) tensor_map_encode_tiled = nullptr;
    decltype(&::cuOccupancyMaxActiveClusters) occupancy_max_active_clusters = nullptr;

    decltype(&::cuEventCreate) event_create = nullptr;
    decltype(&::cuEventDestroy) event_destroy = nullptr;
    decltype(&::cuEventRecord) event_record = nullptr;
    decltype(&::cuEventSynchronize) event_synchronize = nullptr;
    decltype(&::cuEventElapsedTime) event_elapsed_time = nullptr;

    decltype(&::cuGraphInstantiate) graph_instantiate = nullptr;
    decltype(&::cuGraphLaunch) graph_launch = nullptr;
    decltype(&::cuGraphDestroy) graph_destroy = nullptr;
    decltype(&::cuGraphExecDestroy) graph_exec_destroy = nullptr;
};

// The loaded driver, initialized (cuInit) once per process. Throws
// Error(NoDriver) with what to install when libcuda.so.1 is missing or too old.
const Driver& driver();

// Whether `driver()` would succeed; `reason` gets the one-line why-not.
bool driver_available(std::string* reason = nullptr);

// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)" for a result code.
std::string describe(CUresult result);

// Throws Error(Driver) naming `what` when `result` is not CUDA_SUCCESS.
void check(CUresult result, std::string_view what);

}  // namespace nbits::cuda

#pragma once

#include "nbits/runtime.hpp"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace nbits::test {

// The runtime every GPU test shares (created once by the GPU test main).
CudaRuntime& gpu();
const std::shared_ptr<CudaRuntime>& gpu_shared();

// Options of the shared runtime: the on-disk cache follows the environment,
// so gpu-check can prewarm it once for the whole suite.
RuntimeOptions shared_runtime_options();

template <typename T>
DeviceBuffer upload(CudaRuntime& runtime, const std::vector<T>& values)
{
    DeviceBuffer buffer(runtime, values.size() * sizeof(T));
    if (!values.empty()) {
        runtime.htod(buffer.get(), values.data(), values.size() * sizeof(T));
    }
    return buffer;
}

template <typename T>
std::vector<T> download(CudaRuntime& runtime, CUdeviceptr pointer, std::size_t count)
{
    std::vector<T> values(count);
    if (count != 0) {
        runtime.dtoh(values.data(), pointer, count * sizeof(T));
    }
    return values;
}

template <typename T>
std::vector<T> download(CudaRuntime& runtime, const DeviceBuffer& buffer)
{
    return download<T>(runtime, buffer.get(), buffer.size() / sizeof(T));
}

// A buffer filled with a byte pattern, so that unwritten outputs show.
inline DeviceBuffer poisoned(CudaRuntime& runtime, std::size_t bytes, std::uint8_t pattern = 0xA5)
{
    DeviceBuffer buffer(runtime, bytes);
    runtime.memset_async(buffer.get(), pattern, bytes);
    runtime.synchronize();
    return buffer;
}

}  // namespace nbits::test

#pragma once

// What the report needs to know about the device and what each shape needs
// to size its buffers.

#include "nbits/runtime.hpp"

#include <cstddef>
#include <string>

namespace nbits::bench {

struct DeviceFacts {
    std::string name;
    int compute_major = 0;
    int compute_minor = 0;
    int multiprocessors = 0;
    std::size_t l2_bytes = 0;
    std::size_t total_memory = 0;
    int driver_version = 0;   // 13000 for CUDA 13.0
    std::string nvrtc_version;
};

DeviceFacts read_device_facts(CudaRuntime& runtime);
std::size_t free_device_memory(CudaRuntime& runtime);

}  // namespace nbits::bench

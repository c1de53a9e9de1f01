#include "device.hpp"
#include "runtime/internals.hpp"

#include "cuda/driver.hpp"
#include "jit/compile.hpp"

namespace nbits::bench {

DeviceFacts read_device_facts(CudaRuntime& runtime)
{
    const cuda::Driver& driver = cuda::driver();
    CudaRuntime::Internals::ScopedContext scope(runtime);
    CUdevice device = 0;
    cuda::check(driver.device_get(&device, runtime.device()), "opening the CUDA device");
    int l2 = 0;
    cuda::check(driver.device_get_attribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, device), "reading the L2 size");
    std::size_t total = 0;
    cuda::check(driver.device_total_mem(&total, device), "reading the device memory size");

    DeviceFacts facts;
    const Capabilities& capabilities = runtime.capabilities();
    facts.name = capabilities.name;
    facts.compute_major = capabilities.compute_major;
    facts.compute_minor = capabilities.compute_minor;
    facts.multiprocessors = static_cast<int>(capabilities.multiprocessor_count);
    facts.l2_bytes = static_cast<std::size_t>(l2);
    facts.total_memory = total;
    facts.driver_version = driver.version;
    facts.nvrtc_version = jit::nvrtc_version();
    return facts;
}

std::size_t free_device_memory(CudaRuntime& runtime)
{
    CudaRuntime::Internals::ScopedContext scope(runtime);
    std::size_t free_bytes = 0;
    std::size_t total_bytes = 0;
    cuda::check(cuda::driver().mem_get_info(&free_bytes, &total_bytes), "reading free device memory");
    return free_bytes;
}

}  // namespace nbits::bench

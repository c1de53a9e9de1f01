#include "local_targets.hpp"

#include "cuda/driver.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace nbits::prewarm {

LocalTargets local_targets()
{
    LocalTargets local;
    int count = 0;
    if (cuda::driver_available()) {
        const cuda::Driver& d = cuda::driver();
        if (d.device_get_count(&count) != CUDA_SUCCESS) {
            count = 0;
        }
        for (int ordinal = 0; ordinal < count; ++ordinal) {
            CUdevice device = 0;
            int major = 0;
            int minor = 0;
            if (d.device_get(&device, ordinal) == CUDA_SUCCESS &&
                d.device_get_attribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device) == CUDA_SUCCESS &&
                d.device_get_attribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device) == CUDA_SUCCESS &&
                major > 0) {
                const jit::Target target = jit::Target::cubin(major, minor);
                if (std::find(local.targets.begin(), local.targets.end(), target) == local.targets.end()) {
                    local.targets.push_back(target);
                }
            }
        }
    }
    if (!local.targets.empty()) {
        local.note = fmt::format("--arch not given: compiling for this machine's GPUs ({} device(s))", count);
        return local;
    }
    local.targets.push_back(jit::Target::cubin(9, 0));
    local.note = "--arch not given and no GPU here: compiling for sm_90";
    return local;
}

}  // namespace nbits::prewarm

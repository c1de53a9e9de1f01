#pragma once

#include "jit/image_store.hpp"
#include "jit/kernel_source.hpp"
#include "jit/target.hpp"
#include "nbits/options.hpp"

#include <cuda.h>

#include <atomic>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace nbits {

// The request the module cache compiles for `entry` of `source` (the entry
// is ignored at Source granularity). nbits-prewarm builds its requests here
// too, so that it writes exactly the images a runtime looks up.
jit::CompileRequest module_request(const jit::KernelSource& source, std::string_view entry,
                                   const jit::Defines& defines, CompileGranularity granularity,
                                   const jit::Target& target);

struct ModuleCacheStats {
    std::uint64_t compiles = 0;      // NVRTC runs
    std::uint64_t store_loads = 0;   // images taken from the on-disk cache
    std::uint64_t modules = 0;       // modules loaded into the context
    std::uint64_t lookups = 0;       // function() calls
};

// Compiled, loaded functions of one context, keyed by (source digest, entry,
// target). Each (source, entry) compiles at most once per process, also when
// several threads ask for it at the same time. The caller makes the context
// current (CudaRuntime does).
class ModuleCache {
public:
    ModuleCache(int compute_major, int compute_minor, CompileGranularity granularity,
                std::shared_ptr<jit::ImageStore> store, JitImage image = JitImage::Ptx);
    ~ModuleCache();
    ModuleCache(const ModuleCache&) = delete;
    ModuleCache& operator=(const ModuleCache&) = delete;

    // `defines` specialise the source (NVRTC -D options); each distinct set
    // is a module of its own. `arch_specific` compiles for the GPU's
    // arch-specific target (compute_90a), whose instructions no other
    // architecture has.
    CUfunction function(const jit::KernelSource& source, std::string_view entry, const jit::Defines& defines = {},
                        bool arch_specific = false);

    // sm_XY when asked for CUBIN; else compute_XY until the driver rejects
    // this toolkit's PTX (CUDA_ERROR_UNSUPPORTED_PTX_VERSION), sm_XY from
    // then on.
    jit::Target target(bool arch_specific = false) const;
    ModuleCacheStats stats() const;
    CompileGranularity granularity() const { return granularity_; }
    jit::ImageStore* store() const { return store_.get(); }

private:
    struct Module;
    std::shared_ptr<Module> load_module(const jit::KernelSource& source, std::string_view entry,
                                        const jit::Defines& defines, bool arch_specific);
    CUmodule load_image(const jit::CompileRequest& request, bool& unsupported_ptx);

    int major_;
    int minor_;
    CompileGranularity granularity_;
    std::shared_ptr<jit::ImageStore> store_;
    std::atomic<bool> cubin_only_{false};

    mutable std::mutex mutex_;
    std::unordered_map<std::string, std::shared_future<std::shared_ptr<Module>>> modules_;
    std::unordered_map<std::string, CUfunction> functions_;
    ModuleCacheStats stats_;
};

}  // namespace nbits

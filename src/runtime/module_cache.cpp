#include "runtime/module_cache.hpp"

#include "cuda/driver.hpp"
#include "nbits/error.hpp"

#include <fmt/format.h>

namespace nbits {

jit::CompileRequest module_request(const jit::KernelSource& source, std::string_view entry,
                                   const jit::Defines& defines, CompileGranularity granularity,
                                   const jit::Target& target)
{
    jit::CompileRequest request;
    request.source = &source;
    request.defines = defines;
    if (granularity == CompileGranularity::Entry) {
        request.entries.emplace_back(entry);
    }
    request.target = target;
    return request;
}

struct ModuleCache::Module {
    CUmodule handle = nullptr;
    ~Module()
    {
        if (handle != nullptr) {
            cuda::driver().module_unload(handle);
        }
    }
};

ModuleCache::ModuleCache(int compute_major, int compute_minor, CompileGranularity granularity,
                         std::shared_ptr<jit::ImageStore> store, JitImage image)
    : major_(compute_major),
      minor_(compute_minor),
      granularity_(granularity),
      store_(std::move(store)),
      cubin_only_(image == JitImage::Cubin)
{
}

ModuleCache::~ModuleCache() = default;

jit::Target ModuleCache::target(bool arch_specific) const
{
    return cubin_only_.load() ? jit::Target::cubin(major_, minor_, arch_specific)
                              : jit::Target::ptx(major_, minor_, arch_specific);
}

ModuleCacheStats ModuleCache::stats() const
{
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
}

CUfunction ModuleCache::function(const jit::KernelSource& source, std::string_view entry, const jit::Defines& defines,
                                 bool arch_specific)
{
    std::string specialisation;
    for (const std::string& define : defines) {
        specialisation.append(" -D").append(define);
    }
    if (arch_specific) {
        specialisation.append(" (arch-specific)");
    }
    std::string function_key;
    function_key.reserve(source.digest().size() + entry.size() + specialisation.size() + 1);
    function_key.append(source.digest()).push_back('/');
    function_key.append(entry).append(specialisation);

    std::shared_future<std::shared_ptr<Module>> pending;
    std::promise<std::shared_ptr<Module>> promise;
    bool owner = false;
    const std::string module_key =
        granularity_ == CompileGranularity::Entry ? function_key : source.digest() + "/*" + specialisation;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        ++stats_.lookups;
        if (auto hit = functions_.find(function_key); hit != functions_.end()) {
            return hit->second;
        }
        auto slot = modules_.find(module_key);
        if (slot == modules_.end()) {
            pending = promise.get_future().share();
            modules_.emplace(module_key, pending);
            owner = true;
        } else {
            pending = slot->second;
        }
    }
    if (owner) {
        try {
            promise.set_value(load_module(source, entry, defines, arch_specific));
        } catch (...) {
            {
                // Forget the failure so that a later call tries again.
                std::lock_guard<std::mutex> lock(mutex_);
                modules_.erase(module_key);
            }
            promise.set_exception(std::current_exception());
        }
    }
    const std::shared_ptr<Module> module = pending.get();
    CUfunction function = nullptr;
    const std::string entry_name(entry);
    cuda::check(cuda::driver().module_get_function(&function, module->handle, entry_name.c_str()),
                fmt::format("looking up kernel entry '{}' in the module of {}.cu", entry, source.name()));
    std::lock_guard<std::mutex> lock(mutex_);
    functions_.emplace(std::move(function_key), function);
    return function;
}

CUmodule ModuleCache::load_image(const jit::CompileRequest& request, bool& unsupported_ptx)
{
    bool compiled_now = false;
    const jit::CompiledImage image = jit::compile_or_load(request, store_.get(), &compiled_now);
    CUmodule module = nullptr;
    const CUresult result = cuda::driver().module_load_data(&module, image.image.data());
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stats_.compiles += compiled_now ? 1 : 0;
        stats_.store_loads += compiled_now ? 0 : 1;
    }
    if (result == CUDA_SUCCESS) {
        return module;
    }
    if (!compiled_now && store_) {
        // A stored image the driver refuses is never reused.
        store_->discard(jit::ImageKey::for_request(request));
    }
    if (result == CUDA_ERROR_UNSUPPORTED_PTX_VERSION && request.target.kind == jit::ImageKind::Ptx) {
        unsupported_ptx = true;
        return nullptr;
    }
    if (!compiled_now) {
        return nullptr;  // the caller compiles afresh
    }
    throw Error(ErrorKind::Driver,
                fmt::format("the driver could not load {} compiled for {}: {}", request.source->name() + ".cu",
                            request.target.str(), cuda::describe(result)));
}

std::shared_ptr<ModuleCache::Module> ModuleCache::load_module(const jit::KernelSource& source, std::string_view entry,
                                                              const jit::Defines& defines, bool arch_specific)
{
    if (!source.has_entry(entry)) {
        throw Error(ErrorKind::InvalidArgument,
                    fmt::format("{}.cu declares no kernel entry '{}'", source.name(), entry));
    }
    jit::CompileRequest request =
        module_request(source, entry, defines, granularity_, jit::Target::cubin(major_, minor_, arch_specific));
    auto module = std::make_shared<Module>();

    // A CUBIN for exactly this GPU, when the cache holds one (nbits-prewarm
    // writes them), loads without the driver's PTX JIT.
    if (store_) {
        if (auto image = store_->load(jit::ImageKey::for_request(request))) {
            if (cuda::driver().module_load_data(&module->handle, image->data()) == CUDA_SUCCESS) {
                std::lock_guard<std::mutex> lock(mutex_);
                ++stats_.store_loads;
                ++stats_.modules;
                return module;
            }
            module->handle = nullptr;
            store_->discard(jit::ImageKey::for_request(request));
        }
    }
    for (int attempt = 0; attempt < 3 && module->handle == nullptr; ++attempt) {
        request.target = target(arch_specific);
        bool unsupported_ptx = false;
        module->handle = load_image(request, unsupported_ptx);
        if (unsupported_ptx) {
            cubin_only_.store(true);
        }
    }
    if (module->handle == nullptr) {
        throw Error(ErrorKind::Driver, fmt::format("the driver refused every image of {}.cu for sm_{}{}{}",
                                                   source.name(), major_, minor_, arch_specific ? "a" : ""));
    }
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.modules;
    return module;
}

}  // namespace nbits

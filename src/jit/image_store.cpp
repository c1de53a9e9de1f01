#include "jit/image_store.hpp"

#include "jit/sha256.hpp"

#include <fstream>
#include <iterator>
#include <map>
#include <mutex>

namespace nbits::jit {

std::string include_dir_identity(const std::string& dir)
{
    static std::mutex mutex;
    static std::map<std::string, std::string> known;
    std::lock_guard<std::mutex> lock(mutex);
    if (auto hit = known.find(dir); hit != known.end()) {
        return hit->second;
    }
    Sha256 hash;
    for (const char* name : {"cuda_fp16.h", "cuda_fp16.hpp"}) {
        std::ifstream file(dir + "/" + name, std::ios::binary);
        const std::string text = file ? std::string(std::istreambuf_iterator<char>(file), {}) : "<missing>";
        hash.update_field(name).update_field(text);
    }
    return known.emplace(dir, "fp16-headers:" + hash.finish_hex()).first->second;
}

ImageKey ImageKey::for_request(const CompileRequest& request)
{
    ImageKey key;
    key.source_digest = request.source->digest();
    key.entries = request.entries;
    key.target = request.target;
    key.nvrtc_version = jit::nvrtc_version();
    key.options = compile_options(request);
    for (std::string& option : key.options) {
        if (option.rfind("-I", 0) == 0) {
            option = "-I<" + include_dir_identity(option.substr(2)) + ">";
        }
    }
    return key;
}

std::string ImageKey::canonical() const
{
    std::string text = "nbits-image-key 1\nsource " + source_digest + "\nentries";
    if (entries.empty()) {
        text += " *";
    }
    for (const std::string& entry : entries) {
        text += " " + entry;
    }
    text += "\ntarget " + target.str() + "\nnvrtc " + nvrtc_version + "\noptions";
    for (const std::string& option : options) {
        text += "\n  " + option;
    }
    text += "\n";
    return text;
}

std::string ImageKey::digest() const { return sha256_hex(canonical()); }

CompiledImage compile_or_load(const CompileRequest& request, ImageStore* store, bool* compiled_now)
{
    if (compiled_now != nullptr) {
        *compiled_now = false;
    }
    if (store != nullptr) {
        const ImageKey key = ImageKey::for_request(request);
        if (std::optional<std::string> image = store->load(key)) {
            CompiledImage loaded;
            loaded.image = std::move(*image);
            loaded.target = request.target;
            loaded.options = key.options;
            return loaded;
        }
    }
    CompiledImage compiled = compile(request);
    if (compiled_now != nullptr) {
        *compiled_now = true;
    }
    if (store != nullptr) {
        store->store(ImageKey::for_request(request), compiled.image);
    }
    return compiled;
}

}  // namespace nbits::jit

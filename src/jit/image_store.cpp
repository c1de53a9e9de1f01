#include "nbits/jit/image_store.hpp"

#include "nbits/jit/sha256.hpp"

namespace nbits::jit {

ImageKey ImageKey::for_request(const CompileRequest& request)
{
    ImageKey key;
    key.source_digest = request.source->digest();
    key.entries = request.entries;
    key.target = request.target;
    key.nvrtc_version = jit::nvrtc_version();
    key.options = compile_options(request);
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

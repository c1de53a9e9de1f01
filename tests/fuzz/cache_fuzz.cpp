// Fuzz target: the disk cache's file reader and a cache directory holding
// whatever the mutated bytes are. Invariants: the decoder never reads out of
// bounds and accepts only what the encoder writes; a load returns exactly a
// sound file's image and removes a damaged one; scan agrees with the
// decoder; verify leaves nothing with a problem; the cache keeps storing;
// printable text stays valid UTF-8 without control bytes.

#include "fuzz_driver.hpp"

#include "jit/cache_file_format.hpp"
#include "jit/cache_text.hpp"
#include "jit/disk_cache.hpp"
#include "kernels.hpp"

#include <filesystem>
#include <string_view>

using namespace nbits;

namespace {

jit::ImageKey key_for(const std::string& digest, std::vector<std::string> entries, jit::Target target)
{
    jit::ImageKey key;
    key.source_digest = digest;
    key.entries = std::move(entries);
    key.target = target;
    key.nvrtc_version = "13.0";
    key.options = {"--gpu-architecture=" + target.str(), "--std=c++17"};
    for (const std::string& entry : key.entries) {
        key.options.push_back("-DNBITS_ENTRY_" + entry + "=1");
    }
    return key;
}

// The key whose path the fuzzed bytes are written to.
const jit::ImageKey& fuzzed_key()
{
    static const jit::ImageKey key = key_for(std::string(64, 'f'), {"fuzz_entry"}, jit::Target::cubin(9, 0));
    return key;
}

// One directory for the whole run: a fresh one per input would spend the
// budget on mkdir.
struct Workspace {
    std::string directory;
    jit::CacheWarnings warnings{[](const std::string&) {}};
    std::unique_ptr<jit::DiskCache> cache;

    Workspace()
    {
        std::string pattern = (std::filesystem::temp_directory_path() / "nbits-cache-fuzz-XXXXXX").string();
        if (::mkdtemp(pattern.data()) == nullptr) {
            throw std::runtime_error("mkdtemp failed for " + pattern);
        }
        directory = pattern;
        cache = std::make_unique<jit::DiskCache>(directory, 1ull << 30, warnings);
    }
    ~Workspace()
    {
        std::error_code ignored;
        std::filesystem::remove_all(directory, ignored);
    }
};

Workspace& workspace()
{
    static Workspace instance;
    return instance;
}

void write_file(const std::string& path, std::string_view bytes)
{
    std::FILE* file = std::fopen(path.c_str(), "wb");
    fuzz::require(file != nullptr, "the workspace accepts files");
    fuzz::require(std::fwrite(bytes.data(), 1, bytes.size(), file) == bytes.size(), "the workspace accepts bytes");
    std::fclose(file);
}

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

bool inside(std::string_view outer, std::string_view part)
{
    return part.empty() || (part.data() >= outer.data() && part.data() + part.size() <= outer.data() + outer.size());
}

bool valid_utf8_without_controls(std::string_view text)
{
    for (std::size_t at = 0; at < text.size();) {
        const auto lead = static_cast<unsigned char>(text[at]);
        if (lead < 0x20 || lead == 0x7f) {
            return false;
        }
        const std::size_t length = lead < 0x80 ? 1 : lead >= 0xc2 && lead <= 0xdf ? 2 : lead >= 0xe0 && lead <= 0xef ? 3
                                                 : lead >= 0xf0 && lead <= 0xf4 ? 4 : 0;
        if (length == 0 || at + length > text.size()) {
            return false;
        }
        for (std::size_t i = 1; i < length; ++i) {
            if ((static_cast<unsigned char>(text[at + i]) & 0xc0u) != 0x80u) {
                return false;
            }
        }
        at += length;
    }
    return true;
}

std::vector<std::string> corpus()
{
    std::vector<std::string> images = {
        "",
        "x",
        ".version 8.8\n.target sm_90\n.address_size 64\n.visible .entry fuzz_entry()\n{\n\tret;\n}\n",
        std::string("\x7f" "ELF\x02\x01\x01\0\0\0\0\0\0\0\0\0\n\n\n", 19),
        std::string(1024, '\0'),
    };
    std::string noise(4096, '\0');
    std::uint64_t state = 7;
    for (char& c : noise) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        c = static_cast<char>(state >> 56);
    }
    images.push_back(noise);

    std::vector<jit::ImageKey> keys = {fuzzed_key()};
    const std::vector<jit::KernelSource>& sources = kernels::all();
    for (std::size_t i = 0; i < sources.size() && i < 3; ++i) {
        keys.push_back(key_for(sources[i].digest(), {sources[i].entries().front()}, jit::Target::ptx(8, 0)));
        keys.push_back(key_for(sources[i].digest(), {}, jit::Target::cubin(8, 6)));
    }
    std::vector<std::string> files;
    for (const std::string& image : images) {
        files.push_back(jit::encode_image_file(fuzzed_key().canonical(), image));
    }
    for (std::size_t k = 1; k < keys.size(); ++k) {
        files.push_back(jit::encode_image_file(keys[k].canonical(), images[k % images.size()]));
    }
    files.push_back(jit::encode_image_file("", ""));
    files.push_back("NBITS JIT IMAGE\nformat 1\n");
    return files;
}

std::vector<std::string> dictionary()
{
    return {"NBITS JIT IMAGE\n", "format 1\n", "format ", "key ", "image ", "sha256 ", "\n\n", "\n",
            "nbits-image-key 1\n", "source ", "entries ", "target sm_90\n", "nvrtc ", "options\n",
            std::string(64, '0'), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"};
}

}  // namespace

// libFuzzer's shape: returns 0, throws fuzz::Finding when an invariant breaks.
int fuzz_cache_file(const std::uint8_t* data, std::size_t size)
{
    const std::string_view bytes(reinterpret_cast<const char*>(data), size);

    // The decoder alone.
    const jit::DecodedImageFile decoded = jit::decode_image_file(bytes);
    if (decoded.ok()) {
        fuzz::require(inside(bytes, decoded.key_text) && inside(bytes, decoded.image), "decoded views lie in the input");
        fuzz::require(jit::encode_image_file(decoded.key_text, decoded.image) == bytes,
                      "an accepted file re-encodes to the same bytes");
        fuzz::require(jit::check_image_file(bytes, jit::image_file_name(decoded.key_text)).ok(),
                      "a sound file is sound under its own name");
    } else {
        fuzz::require(!decoded.problem.empty(), "a rejected file says why");
    }
    fuzz::require(valid_utf8_without_controls(jit::printable(bytes)), "printable text is clean UTF-8");
    fuzz::require(valid_utf8_without_controls(jit::printable(decoded.problem)), "a problem prints cleanly");

    // A directory holding the bytes at a key's path (and, when they decode,
    // under their own key's name too).
    Workspace& w = workspace();
    jit::DiskCache& cache = *w.cache;
    const jit::ImageKey& key = fuzzed_key();
    const std::string path = cache.path_of(key);
    const std::string name = jit::image_file_name(key.canonical());
    write_file(path, bytes);
    std::string own_path;
    if (decoded.ok() && jit::image_file_name(decoded.key_text) != name) {
        own_path = w.directory + "/" + jit::image_file_name(decoded.key_text);
        write_file(own_path, bytes);
    }
    const bool sound = jit::check_image_file(bytes, name).ok();

    const std::vector<jit::CachedImageFile> scanned = cache.scan();
    fuzz::require(scanned.size() == (own_path.empty() ? 1u : 2u), "scan lists every image file");
    for (const jit::CachedImageFile& file : scanned) {
        fuzz::require(file.path != path || file.problem.empty() == sound, "scan agrees with the decoder");
        fuzz::require(file.path != own_path || file.problem.empty(), "a sound file of another key scans sound");
        fuzz::require(valid_utf8_without_controls(jit::printable(file.key_text)), "key text prints cleanly");
    }

    const std::optional<std::string> loaded = cache.load(key);
    fuzz::require(loaded.has_value() == sound, "a load accepts exactly the sound file");
    if (loaded) {
        fuzz::require(*loaded == decoded.image, "a load returns the file's image");
        fuzz::require(exists(path), "a sound file stays");
    } else {
        fuzz::require(!exists(path), "a damaged file is removed by the load that rejects it");
    }

    write_file(path, bytes);
    const jit::DiskCache::Verification verification = cache.verify();
    fuzz::require(verification.not_removed.empty(), "verify removes what it rejects");
    fuzz::require(verification.removed.size() == (sound ? 0u : 1u), "verify rejects exactly the damaged file");
    for (const jit::CachedImageFile& file : cache.scan()) {
        fuzz::require(file.problem.empty(), "nothing with a problem survives verify");
    }

    fuzz::require(!cache.try_store(key, "fresh image").has_value(), "the cache keeps storing");
    fuzz::require(cache.load(key) == std::optional<std::string>("fresh image"), "a stored image loads");
    fuzz::require(cache.writable(), "no input turns stores off");

    const jit::DiskCache::Clearing clearing = cache.clear();
    fuzz::require(clearing.failed.empty(), "clear removes everything");
    fuzz::require(cache.scan().empty(), "nothing survives clear");
    return 0;
}

int main(int argc, char** argv)
{
    return fuzz::main_with(
        argc, argv, "cache_fuzz", corpus, [](const std::uint8_t* data, std::size_t size) { fuzz_cache_file(data, size); },
        dictionary());
}

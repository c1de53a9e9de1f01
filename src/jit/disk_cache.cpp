#include "jit/disk_cache.hpp"

#include "jit/cache_file_format.hpp"
#include "jit/cache_files.hpp"
#include "nbits/error.hpp"

#include <fmt/format.h>

namespace nbits::jit {

DiskCache::DiskCache(std::string directory, std::uint64_t max_bytes, CacheWarnings& warnings)
    : directory_(std::move(directory)), max_bytes_(max_bytes), warnings_(warnings)
{
    if (auto why = cache_files::make_directories(directory_)) {
        throw Error(ErrorKind::Io,
                    fmt::format("cannot use '{}' as the nbits disk cache: {}. How to fix: point NBITS_CACHE_DIR "
                                "(or DiskCacheOptions::directory) at a directory nbits may create and write, or "
                                "set NBITS_CACHE=off",
                                directory_, *why));
    }
}

std::string DiskCache::path_of(const ImageKey& key) const
{
    return directory_ + "/" + image_file_name(key.canonical());
}

std::optional<std::string> DiskCache::load(const ImageKey& key)
{
    const std::string name = image_file_name(key.canonical());
    const std::string path = directory_ + "/" + name;
    std::optional<cache_files::ReadFile> file = cache_files::read(path);
    if (!file) {
        counters_.misses.fetch_add(1);
        return std::nullopt;
    }
    const DecodedImageFile checked = check_image_file(file->bytes, name);
    if (!checked.ok()) {
        // Never a wrong kernel, never a crash: the caller compiles afresh and stores a sound file.
        cache_files::remove_if_unchanged(path, file->identity);
        counters_.removed_damaged.fetch_add(1);
        counters_.misses.fetch_add(1);
        return std::nullopt;
    }
    cache_files::touch(path);
    counters_.hits.fetch_add(1);
    return std::string(checked.image);
}

void DiskCache::store(const ImageKey& key, const std::string& image)
{
    if (!writable_.load()) {
        return;
    }
    const std::string key_text = key.canonical();
    const std::string name = image_file_name(key_text);
    if (auto why = cache_files::write_atomically(directory_, name, encode_image_file(key_text, image))) {
        counters_.failed_writes.fetch_add(1);
        writable_.store(false);
        warnings_.once(CacheWarning::Unusable,
                       fmt::format("the nbits disk cache cannot store compiled kernels ({}); this process keeps "
                                   "new ones in memory only. How to fix: make '{}' writable, point NBITS_CACHE_DIR "
                                   "at a writable directory, or set NBITS_CACHE=off",
                                   *why, directory_));
        return;
    }
    counters_.stores.fetch_add(1);
    evict_beyond_bound(directory_ + "/" + name);
}

void DiskCache::discard(const ImageKey& key) { cache_files::remove(path_of(key)); }

DiskCacheStats DiskCache::stats() const
{
    DiskCacheStats stats;
    stats.hits = counters_.hits.load();
    stats.misses = counters_.misses.load();
    stats.stores = counters_.stores.load();
    stats.removed_damaged = counters_.removed_damaged.load();
    stats.evicted = counters_.evicted.load();
    stats.failed_writes = counters_.failed_writes.load();
    return stats;
}

std::shared_ptr<DiskCache> open_disk_cache(const DiskCacheOptions& options, const EnvLookup& env,
                                           CacheWarnings& warnings)
{
    const CacheLocation location = resolve_cache_location(options, env);
    if (!location.ignored_setting.empty()) {
        warnings.once(CacheWarning::IgnoredSetting, location.ignored_setting);
    }
    if (!location.unusable_reason.empty()) {
        warnings.once(CacheWarning::Unusable, location.unusable_reason);
    }
    if (!location.enabled) {
        return nullptr;
    }
    try {
        return std::make_shared<DiskCache>(location.directory, location.max_bytes, warnings);
    } catch (const Error& error) {
        warnings.once(CacheWarning::Unusable,
                      std::string(error.what()) + ". Meanwhile compiled kernels stay in memory and every process compiles them again");
        return nullptr;
    }
}

std::shared_ptr<DiskCache> open_disk_cache(const DiskCacheOptions& options)
{
    return open_disk_cache(options, process_environment(), CacheWarnings::process());
}

std::shared_ptr<ImageStore> as_image_store(const std::shared_ptr<DiskCache>& cache) { return cache; }

}  // namespace nbits::jit

#include "jit/disk_cache.hpp"

#include "jit/cache_file_format.hpp"
#include "jit/cache_files.hpp"
#include "nbits/error.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <charconv>
#include <csignal>
#include <unistd.h>

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
    const cache_files::ReadFile file = cache_files::read(path);
    if (file.status != cache_files::ReadFile::Status::Read) {
        // Something unreadable at the path stays: a store renames over it
        // (or reports, once, what blocks it).
        counters_.misses.fetch_add(1);
        return std::nullopt;
    }
    const DecodedImageFile checked = check_image_file(file.bytes, name);
    if (!checked.ok()) {
        // Never a wrong kernel, never a crash: the caller compiles afresh and stores a sound file.
        cache_files::remove_if_unchanged(path, file.identity);
        counters_.removed_damaged.fetch_add(1);
        counters_.misses.fetch_add(1);
        return std::nullopt;
    }
    cache_files::touch(path);
    counters_.hits.fetch_add(1);
    return std::string(checked.image);
}

std::optional<std::string> DiskCache::try_store(const ImageKey& key, const std::string& image)
{
    if (!writable_.load()) {
        return fmt::format("{} is not writable (an earlier store failed)", directory_);
    }
    const std::string key_text = key.canonical();
    const std::string name = image_file_name(key_text);
    if (auto failure = cache_files::write_atomically(directory_, name, encode_image_file(key_text, image))) {
        counters_.failed_writes.fetch_add(1);
        if (failure->directory_unwritable) {
            writable_.store(false);
            warnings_.once(CacheWarning::Unusable,
                           fmt::format("the nbits disk cache cannot store compiled kernels ({}); this process keeps "
                                       "new ones in memory only. How to fix: make '{}' writable, point "
                                       "NBITS_CACHE_DIR at a writable directory, or set NBITS_CACHE=off",
                                       failure->why, directory_));
        } else {
            warnings_.once(CacheWarning::StoreFailed,
                           fmt::format("the nbits disk cache cannot store a compiled kernel ({}); it stays in "
                                       "memory, and other kernels are still stored. How to fix: remove what "
                                       "occupies the image's path (`nbits-prewarm --verify --cache-dir {}` does)",
                                       failure->why, directory_));
        }
        return failure->why;
    }
    counters_.stores.fetch_add(1);
    evict_beyond_bound(directory_ + "/" + name);
    return std::nullopt;
}

void DiskCache::discard(const ImageKey& key) { cache_files::remove(path_of(key)); }

namespace {

std::string host_name()
{
    char name[256] = {};
    ::gethostname(name, sizeof(name) - 1);
    return name;
}

// What a claim file holds: enough to tell, on this host, whether its holder lives.
std::string claim_content() { return fmt::format("pid {}\nhost {}\n", ::getpid(), host_name()); }

bool holder_gone(std::string_view content)
{
    const std::size_t newline = content.find('\n');
    if (content.substr(0, 4) != "pid " || newline == std::string_view::npos) {
        return false;
    }
    const std::string_view pid_text = content.substr(4, newline - 4);
    std::string_view host_line = content.substr(newline + 1);
    host_line = host_line.substr(0, host_line.find('\n'));
    long long pid = 0;
    const auto [end, error] = std::from_chars(pid_text.data(), pid_text.data() + pid_text.size(), pid);
    if (error != std::errc() || end != pid_text.data() + pid_text.size() || pid <= 0) {
        return false;
    }
    // Another host's processes cannot be asked; only the age rule ends their claims.
    return host_line == "host " + host_name() && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

}  // namespace

ImageClaim& ImageClaim::operator=(ImageClaim&& other) noexcept
{
    if (this != &other) {
        release();
        state_ = other.state_;
        path_ = std::move(other.path_);
        identity_ = other.identity_;
        other.state_ = State::Unavailable;
        other.path_.clear();
    }
    return *this;
}

void ImageClaim::release()
{
    if (state_ == State::Acquired) {
        cache_files::remove_if_unchanged(path_, identity_);
    }
    state_ = State::Unavailable;
    path_.clear();
}

ImageClaim DiskCache::claim(const ImageKey& key)
{
    ImageClaim claim;
    const std::string path = directory_ + "/" + std::string(kClaimFilePrefix) + image_file_name(key.canonical());
    // Twice at most: once more after taking over an abandoned claim.
    for (int attempt = 0; attempt < 2; ++attempt) {
        const cache_files::CreatedMarker marker = cache_files::create_exclusive(path, claim_content());
        if (marker.created) {
            claim.state_ = ImageClaim::State::Acquired;
            claim.path_ = path;
            claim.identity_ = marker.identity;
            return claim;
        }
        if (!marker.exists) {
            claim.state_ = ImageClaim::State::Unavailable;
            return claim;
        }
        const cache_files::ReadFile held = cache_files::read(path);
        if (held.status == cache_files::ReadFile::Status::Missing) {
            continue;  // released since
        }
        if (held.status == cache_files::ReadFile::Status::Unusable) {
            claim.state_ = ImageClaim::State::Unavailable;  // not a claim file: nobody holds it, nobody can
            return claim;
        }
        const bool abandoned = cache_files::now_ns() - held.modified_ns > kAbandonedAfterNs || holder_gone(held.bytes);
        if (!abandoned) {
            break;
        }
        cache_files::remove_if_unchanged(path, held.identity);
    }
    claim.state_ = ImageClaim::State::HeldElsewhere;
    return claim;
}

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

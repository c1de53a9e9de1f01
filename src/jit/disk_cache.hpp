#pragma once

#include "jit/cache_files.hpp"
#include "jit/environment.hpp"
#include "jit/image_store.hpp"
#include "nbits/options.hpp"

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace nbits::jit {

using nbits::DiskCacheOptions;
using nbits::kDefaultCacheMaxBytes;

// The options and the environment combined.
struct CacheLocation {
    bool enabled = false;
    std::string directory;
    std::uint64_t max_bytes = kDefaultCacheMaxBytes;
    // Why the cache is off, when nobody switched it off on purpose (no
    // directory could be named); a warning for the user.
    std::string unusable_reason;
    // A setting that was ignored, and why; a warning for the user.
    std::string ignored_setting;
};

// Pure: reads the environment only through `env`.
CacheLocation resolve_cache_location(const DiskCacheOptions& options, const EnvLookup& env);
// The same over the process environment.
CacheLocation resolve_cache_location(const DiskCacheOptions& options);

// "4096", "64K", "512M", "2G" (binary multiples, case-insensitive) in bytes;
// nothing for any other text or for zero.
std::optional<std::uint64_t> parse_byte_size(std::string_view text);

// A cache problem degrades nbits to compiling in memory; it never fails it.
// Each kind of problem is told once per process, however often it recurs.
enum class CacheWarning {
    Unusable,        // nothing can be stored (or nothing read)
    IgnoredSetting,  // an environment variable that made no sense
    StoreFailed,     // one image could not be stored; others still are
};

class CacheWarnings {
public:
    using Sink = std::function<void(const std::string& message)>;
    explicit CacheWarnings(Sink sink) : sink_(std::move(sink)) {}
    void once(CacheWarning kind, const std::string& message);
    // The process-wide instance: one line to stderr per kind.
    static CacheWarnings& process();

private:
    Sink sink_;
    std::array<std::atomic<bool>, 3> told_{};
};

struct DiskCacheStats {
    std::uint64_t hits = 0;
    std::uint64_t misses = 0;
    std::uint64_t stores = 0;
    std::uint64_t removed_damaged = 0;  // truncated, corrupted or foreign files deleted on load
    std::uint64_t evicted = 0;
    std::uint64_t failed_writes = 0;
};

// One entry with an image file's name, as a scan of the directory finds it:
// an image file, or whatever else took an image's place (a directory, a
// FIFO, a file nbits cannot read).
struct CachedImageFile {
    std::string path;
    std::uint64_t bytes = 0;
    double seconds_since_use = 0.0;  // last load or store (the entry's mtime)
    std::string key_text;            // the canonical key it was stored under; empty when unreadable
    std::string problem;             // empty: header, key and checksum are sound
    cache_files::EntryType type = cache_files::EntryType::Regular;
    cache_files::FileIdentity identity;  // of the file read, so that removal spares a replacement
};

// A process's claim to compile one image, so that processes prewarming one
// directory at once compile each image once between them. It is a marker
// file next to the image; a claim whose holder died (same host: its process
// is gone; any host: older than kAbandonedAfterNs) is taken over. Released
// when destroyed.
class ImageClaim {
public:
    enum class State {
        Acquired,       // this process compiles the image
        HeldElsewhere,  // another process (or thread) does; wait for its image
        Unavailable,    // no marker can be made here (e.g. a read-only directory)
    };
    ImageClaim() = default;
    ImageClaim(ImageClaim&& other) noexcept { *this = std::move(other); }
    ImageClaim& operator=(ImageClaim&& other) noexcept;
    ImageClaim(const ImageClaim&) = delete;
    ImageClaim& operator=(const ImageClaim&) = delete;
    ~ImageClaim() { release(); }

    State state() const { return state_; }
    void release();

private:
    friend class DiskCache;
    State state_ = State::Unavailable;
    std::string path_;
    cache_files::FileIdentity identity_;
};

// A temporary or claim file this old lost its writer (a crash between create
// and rename, or during a compile); writing one image takes milliseconds and
// compiling one seconds.
inline constexpr std::int64_t kAbandonedAfterNs = 600ll * 1'000'000'000;

// Compiled images in one directory, one file per ImageKey. Safe to share
// between threads and between processes: files appear by atomic rename, a
// file that fails its checks is deleted and reported as absent, and eviction
// tolerates files vanishing under it.
class DiskCache final : public ImageStore {
public:
    // Creates the directory if needed. Throws Error(Io) when it cannot.
    DiskCache(std::string directory, std::uint64_t max_bytes,
              CacheWarnings& warnings = CacheWarnings::process());

    std::optional<std::string> load(const ImageKey& key) override;
    // Best effort, see try_store.
    void store(const ImageKey& key, const std::string& image) override { try_store(key, image); }
    // Nothing when stored, else why not. A directory nothing can be written
    // in turns stores off (one warning); a failure that concerns this image's
    // path alone (a directory someone made there) costs this image only
    // (one warning per process).
    std::optional<std::string> try_store(const ImageKey& key, const std::string& image);
    void discard(const ImageKey& key) override;

    // See ImageClaim.
    ImageClaim claim(const ImageKey& key);

    const std::string& directory() const { return directory_; }
    std::uint64_t max_bytes() const { return max_bytes_; }
    std::string path_of(const ImageKey& key) const;
    bool writable() const { return writable_.load(); }
    DiskCacheStats stats() const;

    // Every entry with an image file's name, checked like a load checks it
    // (type, size, header, key, checksum), oldest use first. Touches nothing.
    std::vector<CachedImageFile> scan() const;

    // A file that should have gone and did not, and why.
    struct Unremoved {
        std::string path;
        std::string why;
    };
    // scan(), then deletes the entries with a problem.
    struct Verification {
        std::size_t checked = 0;
        std::vector<CachedImageFile> removed;
        struct Stayed {
            CachedImageFile file;
            std::string why;
        };
        std::vector<Stayed> not_removed;  // with a problem, still there
    };
    Verification verify();
    // Deletes every image (and whatever took an image's place), and the
    // temporary and claim files that lost their writer. Those of a store or
    // compile in progress stay, so that clearing never breaks a running
    // process.
    struct Clearing {
        std::size_t removed = 0;
        std::size_t in_progress = 0;  // temporary and claim files younger than kAbandonedAfterNs, kept
        std::vector<Unremoved> failed;
    };
    Clearing clear();
    // The bytes of all image files.
    std::uint64_t total_bytes() const;

private:
    void evict_beyond_bound(const std::string& keep_path);

    std::string directory_;
    std::uint64_t max_bytes_;
    CacheWarnings& warnings_;
    std::atomic<bool> writable_{true};
    struct Counters {
        std::atomic<std::uint64_t> hits{0}, misses{0}, stores{0}, removed_damaged{0}, evicted{0},
            failed_writes{0};
    } counters_;
};

// The cache `options` and the environment describe, or nullptr when it is
// switched off or its directory cannot be used (then `warnings` tells why,
// once, and nbits keeps compiled images in memory only).
std::shared_ptr<DiskCache> open_disk_cache(const DiskCacheOptions& options, const EnvLookup& env,
                                           CacheWarnings& warnings);
std::shared_ptr<DiskCache> open_disk_cache(const DiskCacheOptions& options);

// The cache seen as the module cache's image store (nullptr for nullptr).
std::shared_ptr<ImageStore> as_image_store(const std::shared_ptr<DiskCache>& cache);

}  // namespace nbits::jit

#include "jit/disk_cache.hpp"

#include "jit/cache_file_format.hpp"
#include "jit/cache_files.hpp"

#include <algorithm>

namespace nbits::jit {
namespace {

// A temporary file this old lost its writer (a crash between create and
// rename); writing one image takes milliseconds.
constexpr std::int64_t kAbandonedTempFileNs = 3600ll * 1'000'000'000;

std::vector<cache_files::Entry> image_files_oldest_first(const std::string& directory)
{
    std::vector<cache_files::Entry> images = cache_files::list(directory);
    images.erase(std::remove_if(images.begin(), images.end(),
                                [](const cache_files::Entry& entry) { return !is_image_file_name(entry.name); }),
                 images.end());
    std::sort(images.begin(), images.end(), [](const cache_files::Entry& a, const cache_files::Entry& b) {
        return a.modified_ns != b.modified_ns ? a.modified_ns < b.modified_ns : a.name < b.name;
    });
    return images;
}

}  // namespace

std::uint64_t DiskCache::total_bytes() const
{
    std::uint64_t total = 0;
    for (const cache_files::Entry& image : image_files_oldest_first(directory_)) {
        total += image.bytes;
    }
    return total;
}

void DiskCache::evict_beyond_bound(const std::string& keep_path)
{
    const std::int64_t now = cache_files::now_ns();
    for (const cache_files::Entry& entry : cache_files::list(directory_)) {
        if (is_temp_file_name(entry.name) && now - entry.modified_ns > kAbandonedTempFileNs) {
            cache_files::remove(entry.path);
        }
    }
    const std::vector<cache_files::Entry> images = image_files_oldest_first(directory_);
    std::uint64_t total = 0;
    for (const cache_files::Entry& image : images) {
        total += image.bytes;
    }
    for (const cache_files::Entry& image : images) {
        if (total <= max_bytes_) {
            break;
        }
        if (image.path == keep_path) {
            continue;  // the image just stored stays, even when it alone exceeds the bound
        }
        // Another process evicting at the same time may have removed it first:
        // either way its bytes are gone.
        if (cache_files::remove(image.path)) {
            counters_.evicted.fetch_add(1);
        }
        total -= image.bytes;
    }
}

std::vector<CachedImageFile> DiskCache::scan() const
{
    const std::int64_t now = cache_files::now_ns();
    std::vector<CachedImageFile> files;
    for (const cache_files::Entry& image : image_files_oldest_first(directory_)) {
        std::optional<cache_files::ReadFile> read = cache_files::read(image.path);
        if (!read) {
            continue;  // removed since the listing
        }
        const DecodedImageFile checked = check_image_file(read->bytes, image.name);
        CachedImageFile file;
        file.path = image.path;
        file.bytes = read->bytes.size();
        file.seconds_since_use = static_cast<double>(std::max<std::int64_t>(0, now - image.modified_ns)) * 1e-9;
        file.key_text = std::string(checked.key_text);
        file.problem = checked.problem;
        files.push_back(std::move(file));
    }
    return files;
}

DiskCache::Verification DiskCache::verify()
{
    Verification verification;
    for (CachedImageFile& file : scan()) {
        ++verification.checked;
        if (!file.problem.empty()) {
            cache_files::remove(file.path);
            verification.removed.push_back(std::move(file));
        }
    }
    return verification;
}

std::size_t DiskCache::clear()
{
    std::size_t removed = 0;
    for (const cache_files::Entry& entry : cache_files::list(directory_)) {
        if ((is_image_file_name(entry.name) || is_temp_file_name(entry.name)) && cache_files::remove(entry.path)) {
            ++removed;
        }
    }
    return removed;
}

}  // namespace nbits::jit

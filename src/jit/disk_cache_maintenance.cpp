#include "jit/disk_cache.hpp"

#include "jit/cache_file_format.hpp"
#include "jit/cache_files.hpp"

#include <algorithm>

namespace nbits::jit {
namespace {

bool oldest_first(const cache_files::Entry& a, const cache_files::Entry& b)
{
    return a.modified_ns != b.modified_ns ? a.modified_ns < b.modified_ns : a.name < b.name;
}

// The entries with an image's name (whatever their type), oldest first.
std::vector<cache_files::Entry> image_entries_oldest_first(const std::string& directory)
{
    std::vector<cache_files::Entry> images = cache_files::list(directory);
    images.erase(std::remove_if(images.begin(), images.end(),
                                [](const cache_files::Entry& entry) { return !is_image_file_name(entry.name); }),
                 images.end());
    std::sort(images.begin(), images.end(), oldest_first);
    return images;
}

std::vector<cache_files::Entry> image_files_oldest_first(const std::string& directory)
{
    std::vector<cache_files::Entry> images = image_entries_oldest_first(directory);
    images.erase(std::remove_if(images.begin(), images.end(),
                                [](const cache_files::Entry& entry) {
                                    return entry.type != cache_files::EntryType::Regular;
                                }),
                 images.end());
    return images;
}

bool is_work_file_name(std::string_view name) { return is_temp_file_name(name) || is_claim_file_name(name); }

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
        if (entry.type == cache_files::EntryType::Regular && is_work_file_name(entry.name) &&
            now - entry.modified_ns > kAbandonedAfterNs) {
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
    for (const cache_files::Entry& entry : image_entries_oldest_first(directory_)) {
        CachedImageFile file;
        file.path = entry.path;
        file.type = entry.type;
        file.bytes = entry.bytes;
        file.seconds_since_use = static_cast<double>(std::max<std::int64_t>(0, now - entry.modified_ns)) * 1e-9;
        const cache_files::ReadFile read = cache_files::read(entry.path);
        if (read.status == cache_files::ReadFile::Status::Missing) {
            continue;  // removed since the listing
        }
        if (read.status == cache_files::ReadFile::Status::Unusable) {
            file.problem = read.problem;
            if (entry.type == cache_files::EntryType::Directory) {
                file.problem += " (it keeps this image from being stored)";
            }
        } else {
            const DecodedImageFile checked = check_image_file(read.bytes, entry.name);
            file.identity = read.identity;
            file.bytes = read.bytes.size();
            file.key_text = std::string(checked.key_text);
            file.problem = checked.problem;
        }
        files.push_back(std::move(file));
    }
    return files;
}

DiskCache::Verification DiskCache::verify()
{
    Verification verification;
    for (CachedImageFile& file : scan()) {
        ++verification.checked;
        if (file.problem.empty()) {
            continue;
        }
        // A regular file goes only while it is the one checked: another
        // process may have stored a sound image in its place since.
        const std::optional<std::string> why = file.type == cache_files::EntryType::Regular && file.identity.inode != 0
                                                   ? cache_files::remove_if_unchanged(file.path, file.identity)
                                                   : cache_files::remove_entry(file.path);
        if (why) {
            verification.not_removed.push_back({std::move(file), *why});
        } else {
            verification.removed.push_back(std::move(file));
        }
    }
    return verification;
}

DiskCache::Clearing DiskCache::clear()
{
    Clearing clearing;
    const std::int64_t now = cache_files::now_ns();
    for (const cache_files::Entry& entry : cache_files::list(directory_)) {
        if (is_work_file_name(entry.name) && entry.type == cache_files::EntryType::Regular &&
            now - entry.modified_ns <= kAbandonedAfterNs) {
            ++clearing.in_progress;
            continue;
        }
        if (!is_image_file_name(entry.name) && !is_work_file_name(entry.name)) {
            continue;  // not nbits' to remove
        }
        if (const std::optional<std::string> why = cache_files::remove_entry(entry.path)) {
            clearing.failed.push_back({entry.path, *why});
        } else {
            ++clearing.removed;
        }
    }
    return clearing;
}

}  // namespace nbits::jit

#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

// The POSIX file operations of the disk cache, each safe against other
// processes working in the same directory at the same time.
namespace nbits::jit::cache_files {

// Which file was read, so that a damaged one is removed only while it is
// still the file at that path (another process may have replaced it).
struct FileIdentity {
    std::uint64_t device = 0;
    std::uint64_t inode = 0;
};

struct ReadFile {
    std::string bytes;
    FileIdentity identity;
};

// The whole file, or nothing when it does not exist or cannot be read.
std::optional<ReadFile> read(const std::string& path);

// Marks the file used now: its mtime orders LRU eviction. In a read-only
// directory the old time simply stays.
void touch(const std::string& path);

// Writes a temporary file in `directory` and renames it to `name`: readers
// see the old file or the new one, never a part. Returns the reason on failure.
std::optional<std::string> write_atomically(const std::string& directory, const std::string& name,
                                            const std::string& bytes);

// Unlinks `path` if it still is the file `identity` names.
void remove_if_unchanged(const std::string& path, const FileIdentity& identity);
// Unlinks `path`; false (and no error) when it was gone already.
bool remove(const std::string& path);

// mkdir -p. Returns the reason on failure.
std::optional<std::string> make_directories(const std::string& path);

struct Entry {
    std::string name;
    std::string path;
    std::uint64_t bytes = 0;
    std::int64_t modified_ns = 0;  // since the epoch
};

// The regular files of `directory` (not recursive); empty when it cannot be read.
std::vector<Entry> list(const std::string& directory);

std::int64_t now_ns();

}  // namespace nbits::jit::cache_files

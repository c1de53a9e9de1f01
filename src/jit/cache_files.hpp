#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

// The POSIX file operations of the disk cache, each safe against other
// processes working in the same directory at the same time, and against
// whatever else a user (or an attacker) put there: nothing here follows a
// symbolic link at an entry's path, blocks on a FIFO or opens a device node.
namespace nbits::jit::cache_files {

enum class EntryType { Regular, Directory, SymbolicLink, Fifo, Socket, Device, Other };

// "a directory", "a FIFO", ... for messages.
const char* describe(EntryType type);

// Which file was read, so that a damaged one is removed only while it is
// still the file at that path (another process may have replaced it).
struct FileIdentity {
    std::uint64_t device = 0;
    std::uint64_t inode = 0;
};

struct ReadFile {
    enum class Status {
        Read,      // `bytes` holds the file (shorter than its size when it shrank while read)
        Missing,   // nothing at the path
        Unusable,  // something is there that is not a readable image-sized regular file: `problem` says what
    };
    Status status = Status::Missing;
    std::string bytes;
    FileIdentity identity;
    std::int64_t modified_ns = 0;  // since the epoch
    std::string problem;
};

// Larger files are not images nbits wrote; reading one would only waste memory.
inline constexpr std::uint64_t kLargestImageFile = 1ull << 30;

// The regular file at `path`, read whole; never opens anything else.
ReadFile read(const std::string& path);

// Marks the file used now: its mtime orders LRU eviction. In a read-only
// directory the old time simply stays.
void touch(const std::string& path);

struct WriteFailure {
    std::string why;
    // True when no file can be written in the directory at all (no
    // permission, read-only or full file system); false when only this name
    // is blocked, e.g. by a directory someone created at its path.
    bool directory_unwritable = false;
};

// Writes a temporary file in `directory` and renames it to `name`: readers
// see the old file or the new one, never a part. An empty directory at the
// name's path is removed first; a temporary file someone else deleted
// before the rename is written once more.
std::optional<WriteFailure> write_atomically(const std::string& directory, const std::string& name,
                                             const std::string& bytes);

// Unlinks `path` if it still is the file `identity` names. Nothing when it
// was removed, or when another file has taken its place since; else why it
// stayed.
std::optional<std::string> remove_if_unchanged(const std::string& path, const FileIdentity& identity);
// Unlinks `path`; false (and no error) when it was gone already.
bool remove(const std::string& path);
// Removes whatever is at `path` (a directory with its contents, without
// following links); nothing when it is gone, else why it stayed.
std::optional<std::string> remove_entry(const std::string& path);

// mkdir -p. Returns the reason on failure.
std::optional<std::string> make_directories(const std::string& path);

struct Entry {
    std::string name;
    std::string path;
    EntryType type = EntryType::Regular;
    std::uint64_t bytes = 0;
    std::int64_t modified_ns = 0;  // since the epoch
};

// Every entry of `directory` but . and .. (not recursive, links not
// followed); empty when it cannot be read.
std::vector<Entry> list(const std::string& directory);

// An O_EXCL marker file: created only when nothing is at `path`. The
// holder's description goes into it. `exists` is set when something was.
struct CreatedMarker {
    bool created = false;
    bool exists = false;
    FileIdentity identity;
    std::string why;  // neither created nor existing: the error
};
CreatedMarker create_exclusive(const std::string& path, const std::string& content);

std::int64_t now_ns();

}  // namespace nbits::jit::cache_files

#include "jit/cache_files.hpp"

#include "jit/cache_file_format.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <filesystem>
#include <sys/stat.h>
#include <unistd.h>

namespace nbits::jit::cache_files {
namespace {

// Closes on every path out of a function.
class Descriptor {
public:
    explicit Descriptor(int fd) : fd_(fd) {}
    ~Descriptor()
    {
        if (fd_ >= 0) {
            ::close(fd_);
        }
    }
    Descriptor(const Descriptor&) = delete;
    Descriptor& operator=(const Descriptor&) = delete;
    int get() const { return fd_; }
    // Closes now and reports the result: a write can fail only at close on NFS.
    bool close()
    {
        const int fd = fd_;
        fd_ = -1;
        return ::close(fd) == 0;
    }

private:
    int fd_;
};

std::int64_t modified_ns(const struct stat& info)
{
    return static_cast<std::int64_t>(info.st_mtim.tv_sec) * 1'000'000'000 + info.st_mtim.tv_nsec;
}

std::string errno_text() { return std::strerror(errno); }

EntryType type_of(mode_t mode)
{
    if (S_ISREG(mode)) {
        return EntryType::Regular;
    }
    if (S_ISDIR(mode)) {
        return EntryType::Directory;
    }
    if (S_ISLNK(mode)) {
        return EntryType::SymbolicLink;
    }
    if (S_ISFIFO(mode)) {
        return EntryType::Fifo;
    }
    if (S_ISSOCK(mode)) {
        return EntryType::Socket;
    }
    if (S_ISCHR(mode) || S_ISBLK(mode)) {
        return EntryType::Device;
    }
    return EntryType::Other;
}

ReadFile unusable(std::string problem)
{
    ReadFile file;
    file.status = ReadFile::Status::Unusable;
    file.problem = std::move(problem);
    return file;
}

ReadFile not_a_file(EntryType type) { return unusable(std::string(describe(type)) + ", not an image file"); }

std::string too_large(std::uint64_t bytes)
{
    return fmt::format("{} bytes, larger than any image nbits writes ({} at most)", bytes, kLargestImageFile);
}

// Errors of a write that no other name in the directory would escape.
bool directory_wide(int error) { return error == EROFS || error == ENOSPC || error == EDQUOT || error == EIO; }

}  // namespace

const char* describe(EntryType type)
{
    switch (type) {
    case EntryType::Regular: return "a regular file";
    case EntryType::Directory: return "a directory";
    case EntryType::SymbolicLink: return "a symbolic link";
    case EntryType::Fifo: return "a FIFO";
    case EntryType::Socket: return "a socket";
    case EntryType::Device: return "a device node";
    case EntryType::Other: return "a special file";
    }
    return "a special file";
}

ReadFile read(const std::string& path)
{
    // lstat first: a FIFO or a device node is never opened (opening a FIFO
    // for reading waits for a writer; opening a device can act on it).
    struct stat info {};
    if (::lstat(path.c_str(), &info) != 0) {
        if (errno == ENOENT || errno == ENOTDIR) {
            return ReadFile{};
        }
        return unusable("cannot be examined: " + errno_text());
    }
    if (!S_ISREG(info.st_mode)) {
        return not_a_file(type_of(info.st_mode));
    }
    if (static_cast<std::uint64_t>(info.st_size) > kLargestImageFile) {
        return unusable(too_large(static_cast<std::uint64_t>(info.st_size)));
    }
    // Something else may take the path's place between lstat and open: these
    // flags keep that from blocking or following a link, and fstat checks
    // what was opened.
    Descriptor file(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY));
    if (file.get() < 0) {
        if (errno == ENOENT) {
            return ReadFile{};
        }
        if (errno == ELOOP) {
            return not_a_file(EntryType::SymbolicLink);
        }
        return unusable("cannot be read: " + errno_text());
    }
    if (::fstat(file.get(), &info) != 0) {
        return unusable("cannot be examined: " + errno_text());
    }
    if (!S_ISREG(info.st_mode)) {
        return not_a_file(type_of(info.st_mode));
    }
    if (static_cast<std::uint64_t>(info.st_size) > kLargestImageFile) {
        return unusable(too_large(static_cast<std::uint64_t>(info.st_size)));
    }
    ReadFile read;
    read.status = ReadFile::Status::Read;
    read.identity = {static_cast<std::uint64_t>(info.st_dev), static_cast<std::uint64_t>(info.st_ino)};
    read.modified_ns = modified_ns(info);
    read.bytes.resize(static_cast<std::size_t>(info.st_size));
    std::size_t done = 0;
    while (done < read.bytes.size()) {
        const ssize_t got = ::read(file.get(), read.bytes.data() + done, read.bytes.size() - done);
        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got < 0) {
            return unusable("cannot be read: " + errno_text());
        }
        if (got == 0) {
            break;  // shorter than fstat said: the decoder reports the truncation
        }
        done += static_cast<std::size_t>(got);
    }
    read.bytes.resize(done);
    return read;
}

void touch(const std::string& path) { ::utimensat(AT_FDCWD, path.c_str(), nullptr, AT_SYMLINK_NOFOLLOW); }

std::optional<WriteFailure> write_atomically(const std::string& directory, const std::string& name,
                                             const std::string& bytes)
{
    const std::string final_path = directory + "/" + name;
    // The second attempt covers a temporary file deleted by someone else
    // (an old nbits clearing the directory) between its creation and rename.
    for (int attempt = 0;; ++attempt) {
        std::string temp_path = directory + "/" + std::string(kTempFilePrefix) + name + "-XXXXXX";
        Descriptor file(::mkostemp(temp_path.data(), O_CLOEXEC));
        if (file.get() < 0) {
            return WriteFailure{"cannot create a file in " + directory + ": " + errno_text(), true};
        }
        auto fail = [&](const std::string& what) {
            const int error = errno;
            WriteFailure failure{what + " " + temp_path + ": " + std::strerror(error), true};
            ::unlink(temp_path.c_str());
            return failure;
        };
        // Readable by every user, so that a cache filled at image build time by
        // root serves the unprivileged user the engine runs as.
        if (::fchmod(file.get(), 0644) != 0) {
            return fail("cannot set the permissions of");
        }
        std::size_t done = 0;
        while (done < bytes.size()) {
            const ssize_t put = ::write(file.get(), bytes.data() + done, bytes.size() - done);
            if (put < 0 && errno == EINTR) {
                continue;
            }
            if (put <= 0) {
                return fail("cannot write");
            }
            done += static_cast<std::size_t>(put);
        }
        // No fsync: after a crash a file may be short or hold garbage, and its
        // checksum sends it back to the compiler, which is cheaper than syncing
        // every image on every store.
        if (!file.close()) {
            return fail("cannot write");
        }
        if (::rename(temp_path.c_str(), final_path.c_str()) == 0) {
            return std::nullopt;
        }
        int error = errno;
        if (error == EISDIR && ::rmdir(final_path.c_str()) == 0) {
            // An empty directory held the name; nothing of value is lost.
            if (::rename(temp_path.c_str(), final_path.c_str()) == 0) {
                return std::nullopt;
            }
            error = errno;
        }
        ::unlink(temp_path.c_str());
        const bool directory_gone = error == ENOENT && ::access(directory.c_str(), F_OK) != 0;
        if (error == ENOENT && attempt == 0 && !directory_gone) {
            continue;
        }
        std::string why = fmt::format("cannot rename {} to {}: {}", temp_path, final_path, std::strerror(error));
        if (error == EISDIR || error == ENOTEMPTY || error == EEXIST) {
            why += fmt::format(" (a directory is at the image's path; `nbits-prewarm --verify --cache-dir {}` "
                               "removes it)",
                               directory);
        }
        return WriteFailure{why, directory_wide(error) || directory_gone};
    }
}

std::optional<std::string> remove_if_unchanged(const std::string& path, const FileIdentity& identity)
{
    struct stat info {};
    if (::lstat(path.c_str(), &info) == 0 && static_cast<std::uint64_t>(info.st_dev) == identity.device &&
        static_cast<std::uint64_t>(info.st_ino) == identity.inode && ::unlink(path.c_str()) != 0 &&
        errno != ENOENT) {
        return errno_text();
    }
    return std::nullopt;
}

bool remove(const std::string& path) { return ::unlink(path.c_str()) == 0; }

std::optional<std::string> remove_entry(const std::string& path)
{
    struct stat info {};
    if (::lstat(path.c_str(), &info) != 0) {
        return errno == ENOENT ? std::nullopt : std::optional<std::string>(errno_text());
    }
    if (S_ISDIR(info.st_mode)) {
        std::error_code error;
        std::filesystem::remove_all(path, error);  // does not follow symbolic links
        return error ? std::optional<std::string>(error.message()) : std::nullopt;
    }
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
        return errno_text();
    }
    return std::nullopt;
}

std::optional<std::string> make_directories(const std::string& path)
{
    if (path.empty()) {
        return "the directory name is empty";
    }
    std::size_t at = 0;
    while (at != std::string::npos) {
        at = path.find('/', at + 1);
        const std::string prefix = path.substr(0, at);
        if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
            return "cannot create " + prefix + ": " + errno_text();
        }
    }
    struct stat info {};
    if (::stat(path.c_str(), &info) != 0) {
        return "cannot open " + path + ": " + errno_text();
    }
    if (!S_ISDIR(info.st_mode)) {
        return path + " exists and is not a directory";
    }
    return std::nullopt;
}

std::vector<Entry> list(const std::string& directory)
{
    std::vector<Entry> entries;
    DIR* dir = ::opendir(directory.c_str());
    if (dir == nullptr) {
        return entries;
    }
    while (const dirent* item = ::readdir(dir)) {
        Entry entry;
        entry.name = item->d_name;
        if (entry.name == "." || entry.name == "..") {
            continue;
        }
        entry.path = directory + "/" + entry.name;
        struct stat info {};
        // An entry another process removed since readdir is simply skipped.
        if (::lstat(entry.path.c_str(), &info) != 0) {
            continue;
        }
        entry.type = type_of(info.st_mode);
        entry.bytes = static_cast<std::uint64_t>(info.st_size);
        entry.modified_ns = modified_ns(info);
        entries.push_back(std::move(entry));
    }
    ::closedir(dir);
    return entries;
}

CreatedMarker create_exclusive(const std::string& path, const std::string& content)
{
    CreatedMarker marker;
    Descriptor file(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644));
    if (file.get() < 0) {
        if (errno == EEXIST) {
            marker.exists = true;
        } else {
            marker.why = "cannot create " + path + ": " + errno_text();
        }
        return marker;
    }
    struct stat info {};
    if (::fstat(file.get(), &info) == 0) {
        marker.identity = {static_cast<std::uint64_t>(info.st_dev), static_cast<std::uint64_t>(info.st_ino)};
    }
    // The content only helps to judge whether the holder is gone; a short
    // write leaves a marker that the age rule still ends.
    [[maybe_unused]] const ssize_t written = ::write(file.get(), content.data(), content.size());
    marker.created = true;
    return marker;
}

std::int64_t now_ns()
{
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

}  // namespace nbits::jit::cache_files

#include "jit/cache_files.hpp"

#include "jit/cache_file_format.hpp"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
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

// Larger files are not images nbits wrote; reading one would only waste memory.
constexpr std::uint64_t kLargestImageFile = 1ull << 30;

}  // namespace

std::optional<ReadFile> read(const std::string& path)
{
    Descriptor file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (file.get() < 0) {
        return std::nullopt;
    }
    struct stat info {};
    if (::fstat(file.get(), &info) != 0 || !S_ISREG(info.st_mode) ||
        static_cast<std::uint64_t>(info.st_size) > kLargestImageFile) {
        return std::nullopt;
    }
    ReadFile read;
    read.identity = {static_cast<std::uint64_t>(info.st_dev), static_cast<std::uint64_t>(info.st_ino)};
    read.bytes.resize(static_cast<std::size_t>(info.st_size));
    std::size_t done = 0;
    while (done < read.bytes.size()) {
        const ssize_t got = ::read(file.get(), read.bytes.data() + done, read.bytes.size() - done);
        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got <= 0) {
            break;  // shorter than fstat said: the decoder reports the truncation
        }
        done += static_cast<std::size_t>(got);
    }
    read.bytes.resize(done);
    return read;
}

void touch(const std::string& path) { ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0); }

std::optional<std::string> write_atomically(const std::string& directory, const std::string& name,
                                            const std::string& bytes)
{
    std::string temp_path = directory + "/" + std::string(kTempFilePrefix) + name + "-XXXXXX";
    Descriptor file(::mkostemp(temp_path.data(), O_CLOEXEC));
    if (file.get() < 0) {
        return "cannot create a file in " + directory + ": " + errno_text();
    }
    auto fail = [&](const std::string& what) {
        const std::string why = what + " " + temp_path + ": " + errno_text();
        ::unlink(temp_path.c_str());
        return why;
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
    if (::rename(temp_path.c_str(), (directory + "/" + name).c_str()) != 0) {
        return fail("cannot rename");
    }
    return std::nullopt;
}

void remove_if_unchanged(const std::string& path, const FileIdentity& identity)
{
    struct stat info {};
    if (::stat(path.c_str(), &info) == 0 && static_cast<std::uint64_t>(info.st_dev) == identity.device &&
        static_cast<std::uint64_t>(info.st_ino) == identity.inode) {
        ::unlink(path.c_str());
    }
}

bool remove(const std::string& path) { return ::unlink(path.c_str()) == 0; }

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
        entry.path = directory + "/" + entry.name;
        struct stat info {};
        // A file another process removed since readdir is simply skipped.
        if (::stat(entry.path.c_str(), &info) != 0 || !S_ISREG(info.st_mode)) {
            continue;
        }
        entry.bytes = static_cast<std::uint64_t>(info.st_size);
        entry.modified_ns = modified_ns(info);
        entries.push_back(std::move(entry));
    }
    ::closedir(dir);
    return entries;
}

std::int64_t now_ns()
{
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

}  // namespace nbits::jit::cache_files

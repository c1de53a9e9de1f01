#include "cache_test_support.hpp"
#include "jit/cache_file_format.hpp"
#include "nbits/error.hpp"
#include "jit/disk_cache.hpp"

#include <doctest/doctest.h>

#include "jit/cache_text.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <thread>

using namespace nbits;
using test::TempDir;

namespace {

jit::ImageKey sample_key()
{
    jit::ImageKey key;
    key.source_digest = std::string(64, 'a');
    key.entries = {"tiny_entry"};
    key.target = jit::Target::cubin(9, 0);
    key.nvrtc_version = "13.0";
    key.options = {"--gpu-architecture=sm_90", "--std=c++17", "-DNBITS_ENTRY_tiny_entry=1"};
    return key;
}

jit::ImageKey key_numbered(int n)
{
    jit::ImageKey key = sample_key();
    key.entries = {"entry_" + std::to_string(n)};
    return key;
}

// Warnings a test can count.
struct CountedWarnings {
    std::vector<std::string> messages;
    jit::CacheWarnings warnings{[this](const std::string& message) { messages.push_back(message); }};
};

jit::EnvLookup env_of(const std::map<std::string, std::string>& variables)
{
    return [variables](const char* name) -> std::optional<std::string> {
        auto it = variables.find(name);
        return it == variables.end() ? std::nullopt : std::optional<std::string>(it->second);
    };
}

std::string read_bytes(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes)
{
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

void set_age(const std::string& path, int seconds_ago)
{
    timespec times[2];
    clock_gettime(CLOCK_REALTIME, &times[0]);
    times[0].tv_sec -= seconds_ago;
    times[1] = times[0];
    REQUIRE(::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0);
}

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

// A kernel source that NVRTC compiles in a fraction of a second.
const jit::KernelSource& tiny_source()
{
    static const jit::KernelSource source(
        "tiny", "extern \"C\" __global__ void tiny_entry(int* out) { *out = 42; }\n"
                "extern \"C\" __global__ void tiny_other(int* out) { *out = 7; }\n");
    return source;
}

jit::CompileRequest tiny_request(jit::Target target = jit::Target::ptx(8, 0))
{
    jit::CompileRequest request;
    request.source = &tiny_source();
    request.entries = {"tiny_entry"};
    request.target = target;
    return request;
}

}  // namespace

TEST_SUITE("disk cache")
{
    TEST_CASE("an image file decodes to the key and image it was encoded from")
    {
        const std::string key_text = sample_key().canonical();
        const std::string image("\x7f" "ELF\0\1\2binary", 13);
        const std::string file = jit::encode_image_file(key_text, image);
        const jit::DecodedImageFile decoded = jit::decode_image_file(file);
        REQUIRE(decoded.ok());
        CHECK(decoded.key_text == key_text);
        CHECK(decoded.image == image);
        CHECK(file.rfind("NBITS JIT IMAGE\nformat 1\n", 0) == 0);
        CHECK(jit::check_image_file(file, jit::image_file_name(key_text)).ok());
        CHECK(jit::image_file_name(key_text) == sample_key().digest() + ".v1.nbimg");
    }

    TEST_CASE("every truncation and every flipped byte of an image file is reported, never read past its end")
    {
        const std::string file = jit::encode_image_file(sample_key().canonical(), std::string(300, 'x'));
        for (std::size_t length = 0; length < file.size(); ++length) {
            CAPTURE(length);
            CHECK_FALSE(jit::decode_image_file(std::string_view(file).substr(0, length)).ok());
        }
        for (std::size_t at = 0; at < file.size(); ++at) {
            std::string flipped = file;
            flipped[at] = static_cast<char>(flipped[at] ^ 0x20);
            CAPTURE(at);
            CHECK_FALSE(jit::check_image_file(flipped, jit::image_file_name(sample_key().canonical())).ok());
        }
        CHECK_FALSE(jit::decode_image_file(file + "x").ok());
        CHECK_FALSE(jit::decode_image_file("NBITS JIT IMAGE\nformat 2\n").ok());
        CHECK_FALSE(jit::decode_image_file("NBITS JIT IMAGE\nformat 1\nkey 99999999999999999999\n").ok());
    }

    TEST_CASE("changing any key component misses: digest, entries, target, NVRTC version, options")
    {
        TempDir dir;
        CountedWarnings counted;
        jit::DiskCache cache(dir.path(), jit::kDefaultCacheMaxBytes, counted.warnings);
        const jit::ImageKey key = sample_key();
        cache.store(key, "the image");
        CHECK(cache.load(key) == std::optional<std::string>("the image"));

        std::vector<jit::ImageKey> changed(6, key);
        changed[0].source_digest[0] = 'b';
        changed[1].entries = {"tiny_other"};
        changed[2].entries = {};  // the whole source
        changed[3].target = jit::Target::cubin(8, 0);
        changed[4].nvrtc_version = "12.9";
        changed[5].options.push_back("-I/other/include");
        for (const jit::ImageKey& other : changed) {
            CAPTURE(other.canonical());
            CHECK(other.digest() != key.digest());
            CHECK_FALSE(cache.load(other).has_value());
        }
        jit::ImageKey ptx = key;
        ptx.target = jit::Target::ptx(9, 0);
        CHECK(ptx.digest() != key.digest());
        CHECK(cache.load(key).has_value());
        CHECK(counted.messages.empty());
    }

    TEST_CASE("a truncated, a corrupted and a foreign image are each deleted and recompiled")
    {
        TempDir dir;
        CountedWarnings counted;
        jit::DiskCache cache(dir.path(), jit::kDefaultCacheMaxBytes, counted.warnings);
        const jit::CompileRequest request = tiny_request();
        const std::string path = cache.path_of(jit::ImageKey::for_request(request));

        bool compiled_now = false;
        const jit::CompiledImage first = jit::compile_or_load(request, &cache, &compiled_now);
        CHECK(compiled_now);
        REQUIRE(exists(path));
        const std::string sound_file = read_bytes(path);
        jit::compile_or_load(request, &cache, &compiled_now);
        CHECK_FALSE(compiled_now);

        // An image stored for another arch, renamed into this key's place.
        const jit::CompileRequest other_arch = tiny_request(jit::Target::ptx(8, 6));
        jit::compile_or_load(other_arch, &cache, &compiled_now);
        const std::string foreign_file = read_bytes(cache.path_of(jit::ImageKey::for_request(other_arch)));

        std::string flipped = sound_file;
        flipped[flipped.size() - 20] ^= 0x01;
        const std::map<std::string, std::string> damages = {
            {"truncated", sound_file.substr(0, sound_file.size() / 2)},
            {"flipped byte", flipped},
            {"foreign", foreign_file},
            {"empty", ""},
        };
        std::uint64_t removed = 0;
        for (const auto& [name, damaged] : damages) {
            CAPTURE(name);
            write_bytes(path, damaged);
            const jit::CompiledImage again = jit::compile_or_load(request, &cache, &compiled_now);
            CHECK(compiled_now);
            CHECK(again.image == first.image);
            CHECK(cache.stats().removed_damaged == ++removed);
            CHECK(read_bytes(path) == sound_file);  // recompiled and stored afresh
            jit::compile_or_load(request, &cache, &compiled_now);
            CHECK_FALSE(compiled_now);
        }
        CHECK(counted.messages.empty());
    }

    TEST_CASE("scan and verify report what a load would reject; clear empties the directory")
    {
        TempDir dir;
        CountedWarnings counted;
        jit::DiskCache cache(dir.path(), jit::kDefaultCacheMaxBytes, counted.warnings);
        for (int n = 0; n < 3; ++n) {
            cache.store(key_numbered(n), "image " + std::to_string(n));
        }
        write_bytes(cache.path_of(key_numbered(1)), "garbage");
        std::rename(cache.path_of(key_numbered(2)).c_str(), cache.path_of(key_numbered(9)).c_str());
        write_bytes(dir / "notes.txt", "not ours");

        const std::vector<jit::CachedImageFile> files = cache.scan();
        REQUIRE(files.size() == 3);
        std::map<std::string, std::string> problems;
        for (const auto& file : files) {
            problems[file.path] = file.problem;
        }
        CHECK(problems[cache.path_of(key_numbered(0))].empty());
        CHECK(problems[cache.path_of(key_numbered(1))].find("magic") != std::string::npos);
        CHECK(problems[cache.path_of(key_numbered(9))].find("foreign") != std::string::npos);

        const jit::DiskCache::Verification verification = cache.verify();
        CHECK(verification.checked == 3);
        CHECK(verification.removed.size() == 2);
        CHECK(cache.scan().size() == 1);
        CHECK(cache.load(key_numbered(0)) == std::optional<std::string>("image 0"));
        const jit::DiskCache::Clearing clearing = cache.clear();
        CHECK(clearing.removed == 1);
        CHECK(clearing.failed.empty());
        CHECK(cache.scan().empty());
        CHECK(exists(dir / "notes.txt"));  // files that are not images stay
    }

    TEST_CASE("stores beyond the size bound evict the least recently used images")
    {
        TempDir dir;
        CountedWarnings counted;
        const std::string image(1000, 'i');
        const std::uint64_t file_bytes = jit::encode_image_file(key_numbered(0).canonical(), image).size();
        jit::DiskCache cache(dir.path(), 3 * file_bytes + file_bytes / 2, counted.warnings);

        for (int n = 0; n < 6; ++n) {
            cache.store(key_numbered(n), image);
            set_age(cache.path_of(key_numbered(n)), 600 - 100 * n);  // n = 0 is the oldest
            CHECK(cache.total_bytes() <= cache.max_bytes());
        }
        CHECK(cache.scan().size() == 3);
        CHECK(cache.stats().evicted == 3);
        for (int n = 0; n < 6; ++n) {
            CAPTURE(n);
            CHECK(exists(cache.path_of(key_numbered(n))) == (n >= 3));
        }
    }

    TEST_CASE("a load counts as a use: the image loaded last is evicted last")
    {
        TempDir dir;
        CountedWarnings counted;
        const std::string image(1000, 'i');
        const std::uint64_t file_bytes = jit::encode_image_file(key_numbered(0).canonical(), image).size();
        jit::DiskCache cache(dir.path(), 3 * file_bytes, counted.warnings);
        for (int n = 0; n < 3; ++n) {
            cache.store(key_numbered(n), image);
            set_age(cache.path_of(key_numbered(n)), 300 - 100 * n);
        }
        REQUIRE(cache.load(key_numbered(0)).has_value());  // oldest store, newest use
        cache.store(key_numbered(3), image);
        CHECK(exists(cache.path_of(key_numbered(0))));
        CHECK_FALSE(exists(cache.path_of(key_numbered(1))));
        CHECK(exists(cache.path_of(key_numbered(2))));
        CHECK(exists(cache.path_of(key_numbered(3))));
    }

    TEST_CASE("an image larger than the whole bound is still kept, alone")
    {
        TempDir dir;
        CountedWarnings counted;
        jit::DiskCache cache(dir.path(), 100, counted.warnings);
        cache.store(key_numbered(0), std::string(500, 'a'));
        cache.store(key_numbered(1), std::string(500, 'b'));
        CHECK_FALSE(exists(cache.path_of(key_numbered(0))));
        CHECK(cache.load(key_numbered(1)) == std::optional<std::string>(std::string(500, 'b')));
    }

    TEST_CASE("a directory that cannot be created leaves nbits compiling in memory, with one warning")
    {
        CountedWarnings counted;
        jit::DiskCacheOptions options;
        options.directory = "/dev/null/nbits-cache";  // below a file: no user, root included, can create it
        CHECK(jit::open_disk_cache(options, env_of({}), counted.warnings) == nullptr);
        CHECK(jit::open_disk_cache(options, env_of({}), counted.warnings) == nullptr);
        REQUIRE(counted.messages.size() == 1);
        CHECK(counted.messages[0].find("/dev/null/nbits-cache") != std::string::npos);
        CHECK(counted.messages[0].find("How to fix") != std::string::npos);
        CHECK_THROWS_AS(jit::DiskCache("/dev/null/nbits-cache", 1 << 20, counted.warnings), Error);

        bool compiled_now = false;
        CHECK(!jit::compile_or_load(tiny_request(), nullptr, &compiled_now).image.empty());
        CHECK(compiled_now);
    }

    TEST_CASE("a read-only directory still serves its images; stores stop after one warning")
    {
        TempDir dir;
        CountedWarnings counted;
        {
            jit::DiskCache filler(dir.path(), jit::kDefaultCacheMaxBytes, counted.warnings);
            filler.store(key_numbered(0), "prewarmed");
        }
        ::chmod(dir.path().c_str(), 0555);
        const bool chmod_stops_writes = ::access(dir.path().c_str(), W_OK) != 0;
        // Root writes through chmod; /proc refuses new files to everyone.
        const std::string read_only = chmod_stops_writes ? dir.path() : "/proc";
        jit::DiskCache cache(read_only, jit::kDefaultCacheMaxBytes, counted.warnings);
        if (chmod_stops_writes) {
            CHECK(cache.load(key_numbered(0)) == std::optional<std::string>("prewarmed"));
        }
        for (int n = 1; n < 5; ++n) {
            cache.store(key_numbered(n), "new image");
            CHECK_FALSE(cache.load(key_numbered(n)).has_value());
        }
        CHECK_FALSE(cache.writable());
        CHECK(cache.stats().failed_writes == 1);
        REQUIRE(counted.messages.size() == 1);
        CHECK(counted.messages[0].find("memory only") != std::string::npos);

        jit::DiskCache second(read_only, jit::kDefaultCacheMaxBytes, counted.warnings);
        second.store(key_numbered(7), "new image");
        CHECK(counted.messages.size() == 1);  // once per process, not per cache
    }

    TEST_CASE("threads storing and loading one key see the whole image or nothing")
    {
        TempDir dir;
        CountedWarnings counted;
        jit::DiskCache cache(dir.path(), jit::kDefaultCacheMaxBytes, counted.warnings);
        const std::string image(200000, 'z');
        std::atomic<int> wrong{0};
        std::vector<std::thread> threads;
        for (int t = 0; t < 8; ++t) {
            threads.emplace_back([&] {
                for (int i = 0; i < 20; ++i) {
                    cache.store(sample_key(), image);
                    if (auto loaded = cache.load(sample_key()); loaded && *loaded != image) {
                        wrong.fetch_add(1);
                    }
                }
            });
        }
        for (auto& thread : threads) {
            thread.join();
        }
        CHECK(wrong.load() == 0);
        CHECK(cache.stats().removed_damaged == 0);
        CHECK(cache.scan().size() == 1);
    }
}

namespace {

// load() on a background thread, bounded: a load that blocks (on a FIFO) is
// released by opening the FIFO's other end, and reported as blocked.
struct BoundedLoad {
    bool finished = false;
    std::optional<std::string> image;
};

BoundedLoad load_within(jit::DiskCache& cache, const jit::ImageKey& key, std::chrono::seconds limit)
{
    auto loading = std::async(std::launch::async, [&] { return cache.load(key); });
    BoundedLoad result;
    result.finished = loading.wait_for(limit) == std::future_status::ready;
    if (!result.finished) {
        const int writer = ::open(cache.path_of(key).c_str(), O_WRONLY | O_NONBLOCK);
        if (writer >= 0) {
            ::close(writer);
        }
    }
    result.image = loading.get();
    return result;
}

std::map<std::string, std::string> problems_by_path(const std::vector<jit::CachedImageFile>& files)
{
    std::map<std::string, std::string> problems;
    for (const jit::CachedImageFile& file : files) {
        problems[file.path] = file.problem;
    }
    return problems;
}

void write_claim(const std::string& path, const std::string& content, int seconds_ago)
{
    write_bytes(path, content);
    set_age(path, seconds_ago);
}

std::string this_host()
{
    char name[256] = {};
    ::gethostname(name, sizeof(name) - 1);
    return name;
}

}  // namespace

TEST_SUITE("disk cache: what else may sit in the directory")
{
    TEST_CASE("a FIFO or a link to a device node at an image's path is a miss at once; scan shows it, a store replaces it")
    {
        TempDir dir;
        CountedWarnings counted;
        jit::DiskCache cache(dir.path(), jit::kDefaultCacheMaxBytes, counted.warnings);
        REQUIRE(::mkfifo(cache.path_of(key_numbered(0)).c_str(), 0644) == 0);
        REQUIRE(::symlink("/dev/zero", cache.path_of(key_numbered(1)).c_str()) == 0);

        for (int n = 0; n < 2; ++n) {
            CAPTURE(n);
            const BoundedLoad loaded = load_within(cache, key_numbered(n), std::chrono::seconds(5));
            CHECK(loaded.finished);
            CHECK_FALSE(loaded.image.has_value());
        }
        const std::map<std::string, std::string> problems = problems_by_path(cache.scan());
        REQUIRE(problems.size() == 2);
        CHECK(problems.at(cache.path_of(key_numbered(0))).find("FIFO") != std::string::npos);
        CHECK(problems.at(cache.path_of(key_numbered(1))).find("symbolic link") != std::string::npos);

        cache.store(key_numbered(0), "image 0");
        CHECK(cache.load(key_numbered(0)) == std::optional<std::string>("image 0"));
        const jit::DiskCache::Verification verification = cache.verify();
        CHECK(verification.checked == 2);
        REQUIRE(verification.removed.size() == 1);
        CHECK(verification.removed[0].path == cache.path_of(key_numbered(1)));
        CHECK(::access("/dev/zero", F_OK) == 0);  // the link went, not what it named
        CHECK(counted.messages.empty());
    }

    TEST_CASE("a directory at one image's path costs that image only, with one warning naming it")
    {
        TempDir dir;
        CountedWarnings counted;
        jit::DiskCache cache(dir.path(), jit::kDefaultCacheMaxBytes, counted.warnings);
        const std::string blocked = cache.path_of(key_numbered(0));
        REQUIRE(::mkdir(blocked.c_str(), 0755) == 0);
        write_bytes(blocked + "/inside", "someone's file");
        REQUIRE(::mkdir(cache.path_of(key_numbered(1)).c_str(), 0755) == 0);  // empty: simply taken over

        for (int n = 0; n < 5; ++n) {
            cache.store(key_numbered(n), "image " + std::to_string(n));
        }
        CHECK(cache.writable());
        CHECK_FALSE(cache.load(key_numbered(0)).has_value());
        for (int n = 1; n < 5; ++n) {
            CAPTURE(n);
            CHECK(cache.load(key_numbered(n)) == std::optional<std::string>("image " + std::to_string(n)));
        }
        CHECK(cache.stats().failed_writes == 1);
        REQUIRE(counted.messages.size() == 1);
        CHECK(counted.messages[0].find(blocked) != std::string::npos);
        CHECK(counted.messages[0].find("--verify") != std::string::npos);
        const std::optional<std::string> why = cache.try_store(key_numbered(0), "image 0");
        REQUIRE(why.has_value());
        CHECK(why->find(blocked) != std::string::npos);
        CHECK(counted.messages.size() == 1);

        const std::map<std::string, std::string> problems = problems_by_path(cache.scan());
        REQUIRE(problems.count(blocked) == 1);
        CHECK(problems.at(blocked).find("a directory") != std::string::npos);
        const jit::DiskCache::Verification verification = cache.verify();
        REQUIRE(verification.removed.size() == 1);
        CHECK(verification.removed[0].path == blocked);
        CHECK_FALSE(cache.try_store(key_numbered(0), "image 0").has_value());
        CHECK(cache.load(key_numbered(0)) == std::optional<std::string>("image 0"));
    }

    TEST_CASE("temporary files deleted under running stores do not switch storing off")
    {
        TempDir dir;
        CountedWarnings counted;
        jit::DiskCache cache(dir.path(), jit::kDefaultCacheMaxBytes, counted.warnings);
        std::atomic<bool> storing{true};
        std::atomic<int> deleted{0};
        std::thread deleter([&] {
            while (storing.load()) {
                for (const std::filesystem::directory_entry& entry : std::filesystem::directory_iterator(dir.path())) {
                    if (entry.path().filename().string().rfind(".tmp-", 0) == 0 && ::unlink(entry.path().c_str()) == 0) {
                        deleted.fetch_add(1);
                    }
                }
            }
        });
        const std::string image(256 * 1024, 'i');  // long enough writes for the deleter to catch some
        for (int n = 0; n < 300 && cache.writable(); ++n) {
            cache.store(key_numbered(n), image);
        }
        storing.store(false);
        deleter.join();
        MESSAGE(deleted.load() << " temporary files deleted under the stores");
        CHECK(cache.writable());
        CHECK(cache.try_store(key_numbered(1000), image) == std::nullopt);
        for (const std::string& message : counted.messages) {
            CHECK(message.find("memory only") == std::string::npos);
        }
    }

    TEST_CASE("clear keeps the temporary and claim files of work in progress and removes abandoned ones")
    {
        TempDir dir;
        CountedWarnings counted;
        jit::DiskCache cache(dir.path(), jit::kDefaultCacheMaxBytes, counted.warnings);
        cache.store(key_numbered(0), "image");
        write_bytes(dir / ".tmp-fresh", "being written");
        write_bytes(dir / ".claim-fresh.v1.nbimg", "pid 1\nhost elsewhere\n");
        write_bytes(dir / ".tmp-old", "abandoned");
        set_age(dir / ".tmp-old", 3600);
        write_claim(dir / ".claim-old.v1.nbimg", "pid 1\nhost elsewhere\n", 3600);

        const jit::DiskCache::Clearing clearing = cache.clear();
        CHECK(clearing.removed == 3);
        CHECK(clearing.in_progress == 2);
        CHECK(clearing.failed.empty());
        CHECK(exists(dir / ".tmp-fresh"));
        CHECK(exists(dir / ".claim-fresh.v1.nbimg"));
        CHECK_FALSE(exists(dir / ".tmp-old"));
        CHECK_FALSE(exists(dir / ".claim-old.v1.nbimg"));
        CHECK_FALSE(exists(cache.path_of(key_numbered(0))));
    }

    TEST_CASE("verify and clear say which files stayed in a directory they may not write")
    {
        TempDir dir;
        dir.open_to_all();
        CountedWarnings counted;
        {
            jit::DiskCache filler(dir.path(), jit::kDefaultCacheMaxBytes, counted.warnings);
            filler.store(key_numbered(0), "sound");
            filler.store(key_numbered(1), "to be damaged");
            write_bytes(filler.path_of(key_numbered(1)), "garbage");
        }
        REQUIRE(::chmod(dir.path().c_str(), 0555) == 0);
        const std::string report = test::run_unprivileged([&] {
            CountedWarnings quiet;
            jit::DiskCache cache(dir.path(), jit::kDefaultCacheMaxBytes, quiet.warnings);
            const jit::DiskCache::Verification verification = cache.verify();
            const jit::DiskCache::Clearing clearing = cache.clear();
            std::string text = "verify removed=" + std::to_string(verification.removed.size()) +
                               " not_removed=" + std::to_string(verification.not_removed.size());
            for (const auto& stayed : verification.not_removed) {
                text += " why=" + stayed.why;
            }
            return text + " clear removed=" + std::to_string(clearing.removed) +
                   " failed=" + std::to_string(clearing.failed.size());
        });
        INFO(report);
        CHECK(report.find("verify removed=0 not_removed=1 why=Permission denied") != std::string::npos);
        CHECK(report.find("clear removed=0 failed=2") != std::string::npos);
        ::chmod(dir.path().c_str(), 0755);
        jit::DiskCache cache(dir.path(), jit::kDefaultCacheMaxBytes, counted.warnings);
        CHECK(cache.scan().size() == 2);
    }

    TEST_CASE("scan reports what it cannot read: too large, unreadable and non-regular entries")
    {
        TempDir dir;
        dir.open_to_all();
        CountedWarnings counted;
        jit::DiskCache cache(dir.path(), 4 * jit::kDefaultCacheMaxBytes, counted.warnings);  // the huge file stays
        cache.store(key_numbered(0), "sound");
        const std::string huge = cache.path_of(key_numbered(1));
        {
            std::ofstream create(huge);
        }
        REQUIRE(::truncate(huge.c_str(), static_cast<off_t>(jit::cache_files::kLargestImageFile + 1)) == 0);
        cache.store(key_numbered(2), "secret");
        REQUIRE(::chmod(cache.path_of(key_numbered(2)).c_str(), 0600) == 0);
        REQUIRE(::mkfifo(cache.path_of(key_numbered(3)).c_str(), 0644) == 0);

        const std::string report = test::run_unprivileged([&] {
            std::string text;
            for (const jit::CachedImageFile& file : cache.scan()) {
                text += file.path + ": " + (file.problem.empty() ? "ok" : file.problem) + "\n";
            }
            return text;
        });
        INFO(report);
        CHECK(report.find(cache.path_of(key_numbered(0)) + ": ok") != std::string::npos);
        CHECK(report.find(huge + ": 1073741825 bytes, larger than any image") != std::string::npos);
        CHECK(report.find(cache.path_of(key_numbered(2)) + ": cannot be read: Permission denied") != std::string::npos);
        CHECK(report.find(cache.path_of(key_numbered(3)) + ": a FIFO, not an image file") != std::string::npos);

        const jit::DiskCache::Verification verification = cache.verify();
        CHECK(verification.checked == 4);
        CHECK(verification.removed.size() == 2);  // as root the unreadable one reads fine
        CHECK_FALSE(exists(huge));
    }
}

TEST_SUITE("disk cache: claims")
{
    TEST_CASE("a claim is exclusive until released")
    {
        TempDir dir;
        CountedWarnings counted;
        jit::DiskCache cache(dir.path(), jit::kDefaultCacheMaxBytes, counted.warnings);
        jit::ImageClaim first = cache.claim(key_numbered(0));
        CHECK(first.state() == jit::ImageClaim::State::Acquired);
        CHECK(cache.claim(key_numbered(0)).state() == jit::ImageClaim::State::HeldElsewhere);
        CHECK(cache.claim(key_numbered(1)).state() == jit::ImageClaim::State::Acquired);
        first.release();
        jit::ImageClaim again = cache.claim(key_numbered(0));
        CHECK(again.state() == jit::ImageClaim::State::Acquired);
        jit::ImageClaim moved = std::move(again);
        CHECK(moved.state() == jit::ImageClaim::State::Acquired);
        CHECK(cache.claim(key_numbered(0)).state() == jit::ImageClaim::State::HeldElsewhere);
    }

    TEST_CASE("a claim whose holder is gone, or that is too old, is taken over; another host's fresh claim is not")
    {
        TempDir dir;
        CountedWarnings counted;
        jit::DiskCache cache(dir.path(), jit::kDefaultCacheMaxBytes, counted.warnings);
        const std::string claim_path = dir / (".claim-" + jit::image_file_name(key_numbered(0).canonical()));

        const pid_t child = ::fork();
        if (child == 0) {
            ::_exit(0);
        }
        ::waitpid(child, nullptr, 0);
        write_claim(claim_path, "pid " + std::to_string(child) + "\nhost " + this_host() + "\n", 0);
        CHECK(cache.claim(key_numbered(0)).state() == jit::ImageClaim::State::Acquired);

        write_claim(claim_path, "pid " + std::to_string(::getpid()) + "\nhost " + this_host() + "\n", 0);
        CHECK(cache.claim(key_numbered(0)).state() == jit::ImageClaim::State::HeldElsewhere);

        write_claim(claim_path, "pid 1\nhost some-other-host\n", 0);
        CHECK(cache.claim(key_numbered(0)).state() == jit::ImageClaim::State::HeldElsewhere);
        write_claim(claim_path, "pid 1\nhost some-other-host\n", 11 * 60);
        CHECK(cache.claim(key_numbered(0)).state() == jit::ImageClaim::State::Acquired);

        jit::DiskCache nowhere("/proc", jit::kDefaultCacheMaxBytes, counted.warnings);
        CHECK(nowhere.claim(key_numbered(0)).state() == jit::ImageClaim::State::Unavailable);
    }
}

TEST_SUITE("disk cache: text")
{
    TEST_CASE("printable escapes control characters, C1 controls, bidirectional overrides and bytes that are not UTF-8")
    {
        CHECK(jit::printable("plain /path/ok-ü.v1.nbimg") == "plain /path/ok-ü.v1.nbimg");
        CHECK(jit::printable("\x1b[31mred\x07") == "\\x1b[31mred\\x07");
        CHECK(jit::printable("a\nb\tc") == "a\\x0ab\\x09c");
        CHECK(jit::printable("a\nb", true) == "a\nb");
        CHECK(jit::printable("\x7f") == "\\x7f");
        CHECK(jit::printable("\xc2\x9b" "2J") == "\\u{009b}2J");            // C1 CSI as UTF-8
        CHECK(jit::printable("x\xe2\x80\xaey") == "x\\u{202e}y");           // right-to-left override
        CHECK(jit::printable("\xff\xc0\x80\xed\xa0\x80") == "\\xff\\xc0\\x80\\xed\\xa0\\x80");
        CHECK(jit::printable(std::string("nul\0byte", 8)) == "nul\\x00byte");
        CHECK(jit::printable("\xe2\x82") == "\\xe2\\x82");  // cut sequence
    }

    TEST_CASE("only canonical headers decode: sizes with leading zeros are foreign")
    {
        const std::string key_text = sample_key().canonical();
        const std::string file = jit::encode_image_file(key_text, "img");
        const std::string key_line = "key " + std::to_string(key_text.size()) + "\n";
        std::string padded = file;
        padded.replace(padded.find(key_line), key_line.size(), "key 0" + std::to_string(key_text.size()) + "\n");
        CHECK_FALSE(jit::decode_image_file(padded).ok());
        std::string padded_image = file;
        padded_image.replace(padded_image.find("image 3\n"), 8, "image 03\n");
        CHECK_FALSE(jit::decode_image_file(padded_image).ok());
        CHECK(jit::decode_image_file(jit::encode_image_file("", "")).ok());  // "key 0" itself stays valid
    }
}

TEST_SUITE("disk cache location")
{
    TEST_CASE("the directory: option, then NBITS_CACHE_DIR, then XDG_CACHE_HOME/nbits, then HOME/.cache/nbits")
    {
        std::map<std::string, std::string> env = {
            {"NBITS_CACHE_DIR", "/srv/nbits"}, {"XDG_CACHE_HOME", "/xdg/"}, {"HOME", "/home/u"}};
        jit::DiskCacheOptions options;
        options.directory = "/opt/explicit";
        CHECK(jit::resolve_cache_location(options, env_of(env)).directory == "/opt/explicit");
        options.directory.clear();
        CHECK(jit::resolve_cache_location(options, env_of(env)).directory == "/srv/nbits");
        env.erase("NBITS_CACHE_DIR");
        CHECK(jit::resolve_cache_location(options, env_of(env)).directory == "/xdg/nbits");
        env["XDG_CACHE_HOME"] = "relative/xdg";  // XDG: relative paths are invalid
        CHECK(jit::resolve_cache_location(options, env_of(env)).directory == "/home/u/.cache/nbits");
        env.erase("XDG_CACHE_HOME");
        env["NBITS_CACHE_DIR"] = "";  // empty counts as unset
        const jit::CacheLocation home = jit::resolve_cache_location(options, env_of(env));
        CHECK(home.directory == "/home/u/.cache/nbits");
        CHECK(home.enabled);
        CHECK(home.unusable_reason.empty());

        env.erase("HOME");
        const jit::CacheLocation nowhere = jit::resolve_cache_location(options, env_of(env));
        CHECK_FALSE(nowhere.enabled);
        CHECK(nowhere.unusable_reason.find("NBITS_CACHE_DIR") != std::string::npos);
    }

    TEST_CASE("NBITS_CACHE=off and enabled = false switch the cache off without a warning")
    {
        for (const char* off : {"off", "OFF", "0", "false", "no"}) {
            CAPTURE(off);
            CountedWarnings counted;
            const auto env = env_of({{"NBITS_CACHE", off}, {"HOME", "/home/u"}});
            CHECK_FALSE(jit::resolve_cache_location({}, env).enabled);
            CHECK(jit::open_disk_cache({}, env, counted.warnings) == nullptr);
            CHECK(counted.messages.empty());
        }
        CHECK(jit::resolve_cache_location({}, env_of({{"NBITS_CACHE", "on"}, {"HOME", "/h"}})).enabled);
        jit::DiskCacheOptions disabled;
        disabled.enabled = false;
        CHECK_FALSE(jit::resolve_cache_location(disabled, env_of({{"HOME", "/h"}})).enabled);

        const jit::CacheLocation odd = jit::resolve_cache_location({}, env_of({{"NBITS_CACHE", "maybe"}, {"HOME", "/h"}}));
        CHECK(odd.enabled);
        CHECK(odd.ignored_setting.find("NBITS_CACHE='maybe'") != std::string::npos);
    }

    TEST_CASE("the size bound: option, then NBITS_CACHE_MAX_BYTES, then 1 GiB")
    {
        jit::DiskCacheOptions options;
        const auto env = env_of({{"NBITS_CACHE_MAX_BYTES", "512M"}, {"HOME", "/h"}});
        CHECK(jit::resolve_cache_location(options, env_of({{"HOME", "/h"}})).max_bytes == jit::kDefaultCacheMaxBytes);
        CHECK(jit::resolve_cache_location(options, env).max_bytes == 512ull << 20);
        options.max_bytes = 4096;
        CHECK(jit::resolve_cache_location(options, env).max_bytes == 4096);

        CountedWarnings counted;
        TempDir dir;
        const auto bad = env_of({{"NBITS_CACHE_MAX_BYTES", "lots"}, {"NBITS_CACHE_DIR", dir.path()}});
        const auto cache = jit::open_disk_cache({}, bad, counted.warnings);
        REQUIRE(cache != nullptr);
        CHECK(cache->max_bytes() == jit::kDefaultCacheMaxBytes);
        CHECK(cache->directory() == dir.path());
        REQUIRE(counted.messages.size() == 1);
        CHECK(counted.messages[0].find("NBITS_CACHE_MAX_BYTES='lots'") != std::string::npos);
    }

    TEST_CASE("byte sizes read as plain counts or with binary K, M, G, T suffixes")
    {
        CHECK(jit::parse_byte_size("4096") == 4096u);
        CHECK(jit::parse_byte_size("64k") == 65536u);
        CHECK(jit::parse_byte_size("512M") == 512ull << 20);
        CHECK(jit::parse_byte_size("2G") == 2ull << 30);
        CHECK(jit::parse_byte_size("1t") == 1ull << 40);
        for (const char* bad : {"", "0", "M", "-1", "1.5G", "12MB", "1 G", "99999999999999999999", "20000000T"}) {
            CAPTURE(bad);
            CHECK_FALSE(jit::parse_byte_size(bad).has_value());
        }
    }
}

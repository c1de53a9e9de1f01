// nbits-prewarm, run as a user runs it: as a separate process on a directory.

#include "cache_test_support.hpp"
#include "jit/disk_cache.hpp"
#include "jit/include_dirs.hpp"
#include "kernels.hpp"
#include "runtime/module_cache.hpp"

#include <doctest/doctest.h>

#include <fstream>
#include <future>

using namespace nbits;
using test::TempDir;

namespace {

// The prewarm command line, or empty (the test then says why and passes)
// when this build has no tools.
std::string prewarm_command(const std::string& arguments)
{
    const std::string tool = test::built_tool("nbits-prewarm");
    if (tool.empty()) {
        MESSAGE("nbits-prewarm is not built (NBITS_BUILD_TOOLS=OFF): nothing to run");
        return "";
    }
    return tool + " " + arguments;
}

// Whether `cache` holds the image a runtime would look up for `entry` of
// `source` on `target` at `granularity`.
bool runtime_finds(jit::DiskCache& cache, const std::string& source_name, const std::string& entry,
                   CompileGranularity granularity, const jit::Target& target)
{
    const jit::KernelSource& source = kernels::source(source_name);
    const jit::CompileRequest request =
        module_request(source, entry, {}, granularity, target, jit::discover_include_dirs());
    return cache.load(jit::ImageKey::for_request(request)).has_value();
}

}  // namespace

TEST_SUITE("nbits-prewarm")
{
    TEST_CASE("prewarm writes exactly the images a runtime looks up, and a second run finds them all")
    {
        TempDir dir;
        const std::string command =
            prewarm_command("--cache-dir " + dir.path() + " --arch sm_80,compute_80 --source dequant,pointwise");
        if (command.empty()) {
            return;
        }
        const test::CommandResult first = test::run_command(command);
        INFO(first.output);
        REQUIRE(first.exit_code == 0);
        CHECK(first.output.find("4 compiled, 0 already cached, 0 failed") != std::string::npos);

        jit::DiskCache cache(dir.path(), jit::kDefaultCacheMaxBytes);
        for (const jit::Target& target : {jit::Target::cubin(8, 0), jit::Target::ptx(8, 0)}) {
            CAPTURE(target.str());
            CHECK(runtime_finds(cache, "dequant", "matmul_nbits_dequant_f32", CompileGranularity::Entry, target));
            CHECK(runtime_finds(cache, "pointwise", "matmul_nbits_silu_mul_f16", CompileGranularity::Entry, target));
            CHECK_FALSE(runtime_finds(cache, "dequant", "", CompileGranularity::Source, target));
        }
        CHECK(cache.scan().size() == 4);

        const test::CommandResult second = test::run_command(command + " --json");
        INFO(second.output);
        CHECK(second.exit_code == 0);
        CHECK(second.output.find("\"compiled\": 0,") != std::string::npos);
        CHECK(second.output.find("\"cached\": 4,") != std::string::npos);
    }

    TEST_CASE("--granularity source writes one image per source, under the runtime's whole-source key")
    {
        TempDir dir;
        const std::string command = prewarm_command("--cache-dir " + dir.path() +
                                                    " --arch compute_80 --source dequant --granularity source");
        if (command.empty()) {
            return;
        }
        const test::CommandResult result = test::run_command(command);
        INFO(result.output);
        REQUIRE(result.exit_code == 0);
        jit::DiskCache cache(dir.path(), jit::kDefaultCacheMaxBytes);
        CHECK(runtime_finds(cache, "dequant", "", CompileGranularity::Source, jit::Target::ptx(8, 0)));
        CHECK(cache.scan().size() == 1);
    }

    TEST_CASE("two processes prewarming one directory at once leave a valid cache")
    {
        TempDir dir;
        const std::string command = prewarm_command("--cache-dir " + dir.path() +
                                                    " --arch sm_80 --granularity source --source dequant,pointwise");
        if (command.empty()) {
            return;
        }
        auto first = std::async(std::launch::async, test::run_command, command);
        auto second = std::async(std::launch::async, test::run_command, command);
        const test::CommandResult a = first.get();
        const test::CommandResult b = second.get();
        INFO(a.output);
        INFO(b.output);
        CHECK(a.exit_code == 0);
        CHECK(b.exit_code == 0);

        const test::CommandResult verify = test::run_command(prewarm_command("--cache-dir " + dir.path() + " --verify"));
        INFO(verify.output);
        CHECK(verify.exit_code == 0);
        CHECK(verify.output.find("2 image(s) checked (header, key, SHA-256), 0 damaged") != std::string::npos);
        jit::DiskCache cache(dir.path(), jit::kDefaultCacheMaxBytes);
        for (const jit::CachedImageFile& file : cache.scan()) {
            CHECK(file.problem.empty());
        }
    }

    TEST_CASE("--verify removes a damaged image and exits 1; --list names the images; --clear empties the cache")
    {
        TempDir dir;
        const std::string base = prewarm_command("--cache-dir " + dir.path());
        if (base.empty()) {
            return;
        }
        REQUIRE(test::run_command(base + " --arch compute_80,compute_86 --source dequant").exit_code == 0);

        const test::CommandResult list = test::run_command(base + " --list");
        INFO(list.output);
        CHECK(list.exit_code == 0);
        CHECK(list.output.find("compute_86  dequant ") != std::string::npos);
        CHECK(list.output.find("matmul_nbits_dequant_f32") != std::string::npos);

        jit::DiskCache cache(dir.path(), jit::kDefaultCacheMaxBytes);
        const std::string damaged = cache.scan().front().path;
        std::ofstream(damaged, std::ios::binary | std::ios::trunc) << "NBITS JIT IMAGE\nformat 1\n";

        const test::CommandResult verify = test::run_command(base + " --verify --json");
        INFO(verify.output);
        CHECK(verify.exit_code == 1);
        CHECK(verify.output.find(damaged) != std::string::npos);
        CHECK(test::run_command(base + " --verify").exit_code == 0);

        const test::CommandResult clear = test::run_command(base + " --clear");
        CHECK(clear.exit_code == 0);
        CHECK(clear.output.find("removed 1 file(s)") != std::string::npos);
        CHECK(cache.scan().empty());
    }

    TEST_CASE("usage errors exit 2 and say what was wrong")
    {
        const std::string base = prewarm_command("");
        if (base.empty()) {
            return;
        }
        const std::pair<const char*, const char*> cases[] = {
            {"--arch gfx90a", "not a GPU architecture"},
            {"--granularity both", "expected entry or source"},
            {"--source no_such_source", "no_such_source"},
            {"--jobs 0", "outside"},
            {"--list --clear", "exclude each other"},
            {"--frobnicate", "unknown option"},
        };
        for (const auto& [arguments, message] : cases) {
            CAPTURE(arguments);
            const test::CommandResult result = test::run_command(base + arguments);
            CHECK(result.exit_code == 2);
            CHECK(result.output.find(message) != std::string::npos);
        }
        const test::CommandResult help = test::run_command(base + "--help");
        CHECK(help.exit_code == 0);
        CHECK(help.output.find("--cache-dir DIR") != std::string::npos);
    }

    TEST_CASE("a cache directory that cannot be created fails the prewarm with exit 1")
    {
        const std::string command = prewarm_command("--cache-dir /dev/null/cache --arch compute_80 --source dequant");
        if (command.empty()) {
            return;
        }
        const test::CommandResult result = test::run_command(command);
        INFO(result.output);
        CHECK(result.exit_code == 1);
        CHECK(result.output.find("/dev/null/cache") != std::string::npos);
    }
}

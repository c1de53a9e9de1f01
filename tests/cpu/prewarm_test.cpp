// nbits-prewarm, run as a user runs it: as a separate process on a directory.

#include "cache_test_support.hpp"
#include "jit/disk_cache.hpp"
#include "kernels.hpp"
#include "runtime/module_cache.hpp"

#include <doctest/doctest.h>

#include "jit/cache_file_format.hpp"
#include "matmul_nbits_fixtures.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <fstream>
#include <future>
#include <set>
#include <sstream>

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

// The key a runtime looks up for `entry` of `source` (specialised by
// `defines`) on `target` at `granularity`.
jit::ImageKey runtime_key(const std::string& source_name, const std::string& entry, CompileGranularity granularity,
                          const jit::Target& target, const jit::Defines& defines = {})
{
    const jit::KernelSource& source = kernels::source(source_name);
    return jit::ImageKey::for_request(
        module_request(source, entry, defines, granularity, target));
}

// Whether `cache` holds the image a runtime would look up.
bool runtime_finds(jit::DiskCache& cache, const std::string& source_name, const std::string& entry,
                   CompileGranularity granularity, const jit::Target& target, const jit::Defines& defines = {})
{
    return cache.load(runtime_key(source_name, entry, granularity, target, defines)).has_value();
}

// The number after `"name": ` in JSON text, summed over every occurrence.
std::uint64_t json_sum(const std::string& json, const std::string& name)
{
    std::uint64_t sum = 0;
    const std::string label = "\"" + name + "\": ";
    for (std::size_t at = json.find(label); at != std::string::npos; at = json.find(label, at + 1)) {
        sum += std::stoull(json.substr(at + label.size()));
    }
    return sum;
}

// The dry run's "target  label" lines.
std::set<std::string> dry_run_lines(const std::string& output)
{
    std::set<std::string> lines;
    std::istringstream in(output);
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("sm_", 0) == 0 || line.rfind("compute_", 0) == 0) {
            std::string target = line.substr(0, line.find(' '));
            std::string rest = line.substr(line.find_first_not_of(' ', target.size()));
            lines.insert(target + " " + rest);
        }
    }
    return lines;
}

// What the planner launches for a node on `device` under both policies at
// each M, as the dry run's lines for `target`.
void expect_steps(std::set<std::string>& lines, const test::Problem& base, const std::vector<std::size_t>& ms,
                  const Capabilities& device, const std::string& target)
{
    for (KernelPolicy policy : {KernelPolicy::Original, KernelPolicy::Fastest}) {
        for (std::size_t m : ms) {
            test::Problem p = base;
            p.inputs[0].shape[0] = m;
            p.outputs[0].shape[0] = m;
            p.context.capabilities = device;
            p.context.policy = policy;
            for (const ops::PlanStep& step : p.plan().steps) {
                if (const auto* kernel = std::get_if<ops::KernelStep>(&step)) {
                    // An arch-specific step (the sm_90 wgmma GEMM) compiles for the "a" variant of the target.
                    std::string label = target + (kernel->arch_specific ? "a " : " ") + kernel->source + ":" +
                                        kernel->entry;
                    for (const std::string& define : kernel->defines) {
                        label += " -D" + define;
                    }
                    lines.insert(label);
                }
            }
        }
    }
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
        CHECK(verify.output.find("2 image(s) checked (type, size, header, key, SHA-256), 0 damaged") !=
              std::string::npos);
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
        const std::pair<std::string, std::string> cases[] = {
            {"--arch gfx90a", "not a GPU architecture"},
            {"--granularity both", "expected entry or source"},
            {"--source no_such_source", "no_such_source"},
            {"--jobs 0", "outside"},
            {"--list --clear", "exclude each other"},
            {"--frobnicate", "unknown option"},
            {"--arch ''", "the value is empty"},
            {"--arch=", "the value is empty"},
            {"--arch ,", "no target given"},
            {"--source ''", "the value is empty"},
            {"--source ,", "no source given"},
            {"--arch sm_999", "'sm_999': NVRTC " + jit::nvrtc_version() + " cannot compile for it"},
            {"--arch sm_90x", "not a GPU architecture"},
            {"--arch --cache-dir /tmp", "option '--arch' needs a value, but '--cache-dir' follows it"},
            {"--cache-dir --list", "option '--cache-dir' needs a value, but '--list' follows it"},
            {"--shape 4096", "expected K,N"},
            {"--shape 4096,0", "outside 1.."},
            {"--shape 4096,4096, --dry-run", "expected K,N"},
            {"--shapes /nonexistent/shapes.txt", "cannot read the shapes file '/nonexistent/shapes.txt'"},
            {"--policy quickest", "expected original, fastest or both"},
            {"--act f64", "expected f16, bf16 or f32"},
            {"--bits 3", "expected 4 or 8"},
        };
        for (const auto& [arguments, message] : cases) {
            CAPTURE(arguments);
            const test::CommandResult result = test::run_command(base + arguments);
            CHECK(result.exit_code == 2);
            CHECK(result.output.find(message) != std::string::npos);
        }
        for (const char* spelling : {"--help", "-h"}) {
            CAPTURE(spelling);
            const test::CommandResult help = test::run_command(base + spelling);
            CHECK(help.exit_code == 0);
            CHECK(help.output.find("--cache-dir DIR") != std::string::npos);
        }
    }

    TEST_CASE("--help names every option the parser accepts")
    {
        const std::string base = prewarm_command("");
        if (base.empty()) {
            return;
        }
        const std::string help = test::run_command(base + "--help").output;
        for (const char* option :
             {"--arch LIST", "--granularity entry|source", "--source LIST", "--jobs N", "--shape K,N[,M...]",
              "--shapes FILE", "--bits 4|8", "--block-size B", "--accuracy-level L", "--act f16|bf16|f32",
              "--scales f16|bf16|f32", "--bias none|plain|folded", "--zero-points", "--rmsnorm", "--gate-up",
              "--policy original|fastest|both", "--cache-dir DIR", "--max-bytes SIZE", "--dry-run", "--list",
              "--verify", "--clear", "--json", "--json-out FILE", "--help"}) {
            CAPTURE(option);
            CHECK(help.find(std::string("  ") + option + " ") != std::string::npos);
        }
    }

    TEST_CASE("architecture-specific targets name their family; --arch all covers sm_80 to sm_90 and newer where supported")
    {
        const std::string base = prewarm_command("--dry-run --source dequant ");
        if (base.empty()) {
            return;
        }
        const test::CommandResult specific = test::run_command(base + "--arch sm_90a,sm_90");
        INFO(specific.output);
        CHECK(specific.exit_code == 0);
        CHECK(specific.output.find("sm_90a is the architecture-specific variant of sm_90") != std::string::npos);
        CHECK(specific.output.find("1 image(s) would be compiled") != std::string::npos);

        const test::CommandResult all = test::run_command(base + "--arch all");
        INFO(all.output);
        CHECK(all.exit_code == 0);
        for (const char* target : {"sm_80 ", "sm_86 ", "sm_89 ", "sm_90 "}) {
            CHECK(all.output.find(target) != std::string::npos);
        }
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

TEST_SUITE("nbits-prewarm: a directory others share")
{
    TEST_CASE("a FIFO at an image's path neither blocks the prewarm nor hides from --list; the image replaces it")
    {
        TempDir dir;
        const std::string base = prewarm_command("--cache-dir " + dir.path());
        if (base.empty()) {
            return;
        }
        jit::DiskCache cache(dir.path(), jit::kDefaultCacheMaxBytes);
        const jit::ImageKey key =
            runtime_key("dequant", "matmul_nbits_dequant_f32", CompileGranularity::Entry, jit::Target::ptx(8, 0));
        REQUIRE(::mkfifo(cache.path_of(key).c_str(), 0644) == 0);

        const test::CommandResult list = test::run_command("timeout 60 " + base + " --list");
        INFO(list.output);
        CHECK(list.exit_code == 0);
        CHECK(list.output.find("a FIFO, not an image file") != std::string::npos);

        const test::CommandResult prewarm = test::run_command("timeout 60 " + base + " --arch compute_80 --source dequant");
        INFO(prewarm.output);
        CHECK(prewarm.exit_code == 0);
        CHECK(runtime_finds(cache, "dequant", "matmul_nbits_dequant_f32", CompileGranularity::Entry,
                            jit::Target::ptx(8, 0)));
    }

    TEST_CASE("a directory at one image's path fails that image alone, names it, and --verify removes it")
    {
        TempDir dir;
        const std::string base = prewarm_command("--cache-dir " + dir.path());
        if (base.empty()) {
            return;
        }
        jit::DiskCache cache(dir.path(), jit::kDefaultCacheMaxBytes);
        const std::string blocked = cache.path_of(
            runtime_key("dequant", "matmul_nbits_dequant_f32", CompileGranularity::Entry, jit::Target::ptx(8, 0)));
        REQUIRE(::mkdir(blocked.c_str(), 0755) == 0);
        std::ofstream(blocked + "/inside") << "someone's file";

        const std::string prewarm = base + " --arch compute_80 --source dequant,pointwise --jobs 1";
        const test::CommandResult first = test::run_command(prewarm);
        INFO(first.output);
        CHECK(first.exit_code == 1);
        CHECK(first.output.find(blocked) != std::string::npos);
        CHECK(first.output.find("--verify") != std::string::npos);
        CHECK(first.output.find("not writable") == std::string::npos);
        CHECK(first.output.find("1 compiled, 0 already cached, 1 failed") != std::string::npos);
        CHECK(runtime_finds(cache, "pointwise", "matmul_nbits_silu_mul_f16", CompileGranularity::Entry,
                            jit::Target::ptx(8, 0)));

        const test::CommandResult verify = test::run_command(base + " --verify");
        INFO(verify.output);
        CHECK(verify.exit_code == 1);
        CHECK(verify.output.find("removed " + blocked + ": a directory") != std::string::npos);
        const test::CommandResult second = test::run_command(prewarm);
        INFO(second.output);
        CHECK(second.exit_code == 0);
        CHECK(second.output.find("1 compiled, 1 already cached, 0 failed") != std::string::npos);
    }

    TEST_CASE("--verify and --clear in a directory they may not write say what stayed, and exit 1")
    {
        TempDir dir;
        dir.open_to_all();
        const std::string base = prewarm_command("--cache-dir " + dir.path());
        if (base.empty()) {
            return;
        }
        REQUIRE(test::run_command(base + " --arch compute_80,compute_86 --source dequant").exit_code == 0);
        jit::DiskCache cache(dir.path(), jit::kDefaultCacheMaxBytes);
        const std::string damaged = cache.scan().front().path;
        std::ofstream(damaged, std::ios::binary | std::ios::trunc) << "NBITS JIT IMAGE\nformat 1\n";
        REQUIRE(::chmod(dir.path().c_str(), 0555) == 0);

        const test::CommandResult verify = test::run_command(test::unprivileged_prefix() + base + " --verify");
        INFO(verify.output);
        CHECK(verify.exit_code == 1);
        CHECK(verify.output.find("NOT removed " + damaged) != std::string::npos);
        CHECK(verify.output.find("1 damaged: 0 removed, 1 NOT removed") != std::string::npos);
        CHECK(verify.output.find("How to fix") != std::string::npos);

        const test::CommandResult clear = test::run_command(test::unprivileged_prefix() + base + " --clear --json");
        INFO(clear.output);
        CHECK(clear.exit_code == 1);
        CHECK(clear.output.find("\"removed\": 0") != std::string::npos);
        CHECK(clear.output.find(damaged) != std::string::npos);
        ::chmod(dir.path().c_str(), 0755);
        CHECK(cache.scan().size() == 2);
    }

    TEST_CASE("--json is valid UTF-8 and --list shows no terminal control sequence, whatever the names and keys hold")
    {
        TempDir dir;
        const std::string base = prewarm_command("--cache-dir " + dir.path());
        if (base.empty()) {
            return;
        }
        const std::string key_text = "nbits-image-key 1\nsource \xff\xfe\nentries \x1b[2J\x1b]0;owned\x07x\xc3\n"
                                     "target sm_90\xe2\x80\xae\nnvrtc 13.0\x9b" "1m\noptions\n";
        std::ofstream(dir / jit::image_file_name(key_text), std::ios::binary) << jit::encode_image_file(key_text, "img");
        std::ofstream(dir / "\xff\x1b[31mred.v1.nbimg", std::ios::binary) << "garbage";

        const test::CommandResult list = test::run_command(base + " --list");
        INFO(list.output);
        CHECK(list.exit_code == 0);
        CHECK(list.output.find('\x1b') == std::string::npos);
        CHECK(list.output.find('\x07') == std::string::npos);
        CHECK(list.output.find("\\x1b[2J") != std::string::npos);
        CHECK(list.output.find("\\u{202e}") != std::string::npos);
        CHECK(test::valid_utf8(list.output));
        for (const char* action : {" --list --json", " --verify --json"}) {
            CAPTURE(action);
            const test::CommandResult json = test::run_command(base + action);
            CHECK(test::valid_utf8(json.output));
            CHECK(json.output.find('\x1b') == std::string::npos);
            CHECK(json.output.find("\\u001b") != std::string::npos);
        }
    }

    TEST_CASE("four prewarms of one empty directory compile each image once between them")
    {
        TempDir dir;
        const std::string command = prewarm_command("--cache-dir " + dir.path() +
                                                    " --arch compute_80,compute_86 --source gemv_f32 --jobs 1 --json");
        if (command.empty()) {
            return;
        }
        std::vector<std::future<test::CommandResult>> runs;
        for (int p = 0; p < 4; ++p) {
            runs.push_back(std::async(std::launch::async, test::run_command, command));
        }
        std::uint64_t compiled = 0;
        std::uint64_t images = 0;
        for (auto& run : runs) {
            const test::CommandResult result = run.get();
            INFO(result.output);
            CHECK(result.exit_code == 0);
            const std::string json = result.output.substr(result.output.find("{\n"));
            compiled += json_sum(json, "compiled");
            images = json_sum(json, "images");
        }
        CHECK(images == 2 * kernels::source("gemv_f32").entries().size());
        CHECK(compiled == images);
        jit::DiskCache cache(dir.path(), jit::kDefaultCacheMaxBytes);
        CHECK(cache.scan().size() == images);
        for (const jit::cache_files::Entry& entry : jit::cache_files::list(dir.path())) {
            CHECK(entry.name.rfind(".claim-", 0) != 0);  // every claim released
        }
    }
}

TEST_SUITE("nbits-prewarm: a model's shapes")
{
    TEST_CASE("--shape compiles exactly the kernel steps the planner launches, under both policies, on each target")
    {
        const std::string base = prewarm_command("--dry-run --arch sm_90,sm_89 ");
        if (base.empty()) {
            return;
        }
        // Node options apply to every --shape.
        const test::CommandResult result =
            test::run_command(base + "--shape 4096,11008,1,64 --shape 11008,4096,1 --zero-points --bias plain");
        INFO(result.output);
        REQUIRE(result.exit_code == 0);

        test::Shapes shapes;
        shapes.zero_points = true;
        shapes.bias = true;
        std::set<std::string> expected;
        for (const auto& [node, ms] : {std::make_pair(test::node(4096, 11008), std::vector<std::size_t>{1, 64}),
                                       std::make_pair(test::node(11008, 4096), std::vector<std::size_t>{1})}) {
            const test::Problem p = test::problem(node, shapes);
            for (const Capabilities& device :
                 {Capabilities::h200(), Capabilities::h100(), Capabilities::h100_pcie(), Capabilities::h20()}) {
                expect_steps(expected, p, ms, device, "sm_90");
            }
            for (const Capabilities& device : {Capabilities::rtx4090(), Capabilities::l4(), Capabilities::sm89_46()}) {
                expect_steps(expected, p, ms, device, "sm_89");
            }
        }
        CHECK(dry_run_lines(result.output) == expected);
    }

    TEST_CASE("sm_90 is planned on the H200 and the H100 SXM apart: their bandwidths an SM plan the paired node apart")
    {
        const std::string tool =
            prewarm_command("--dry-run --arch sm_90 --policy fastest --shape 8192,28672,1 --gate-up");
        if (tool.empty()) {
            return;
        }
        const test::CommandResult result = test::run_command(tool);
        INFO(result.output);
        REQUIRE(result.exit_code == 0);
        CHECK(result.output.find("NVIDIA H100 80GB HBM3 (132 SMs)") != std::string::npos);
        CHECK(result.output.find("-DNBITS_CHUNKS=2") != std::string::npos);  // the H200, the H20
        CHECK(result.output.find("-DNBITS_CHUNKS=1") != std::string::npos);  // the H100s
        CHECK(result.output.find("2 image(s) would be compiled") != std::string::npos);
    }

    TEST_CASE("--shape plans with the developer overrides a runtime reads from the environment")
    {
        const std::string tool = prewarm_command("--dry-run --arch sm_90 --policy fastest --shape 4096,6144,128");
        if (tool.empty()) {
            return;
        }
        const test::CommandResult unsplit = test::run_command("env NBITS_PREFILL_SPLIT_K=1 " + tool);
        const test::CommandResult split = test::run_command("env NBITS_PREFILL_SPLIT_K=2 " + tool);
        INFO(unsplit.output);
        INFO(split.output);
        REQUIRE(unsplit.exit_code == 0);
        REQUIRE(split.exit_code == 0);
        // Llama-3-8B qkv at M = 128 (by default the wgmma GEMM over clusters of 4): dequantise + cuBLASLt
        // unsplit, the wgmma GEMM over clusters of 2 (96 CTAs: seven tenths of the H200's SMs) on every sm_90
        // device named.
        CHECK(unsplit.output.find("nbits_dequantize") != std::string::npos);
        CHECK(unsplit.output.find("NBITS_SPLIT_K") == std::string::npos);
        CHECK(split.output.find("sm_90a  matmul_prefill:nbits_prefill_gemm_tma") != std::string::npos);
        CHECK(split.output.find("-DNBITS_WGMMA=1") != std::string::npos);
        CHECK(split.output.find("-DNBITS_SPLIT_K=2") != std::string::npos);
        CHECK(split.output.find("nbits_dequantize") == std::string::npos);
    }

    TEST_CASE("a shapes file lists nodes in the command line's vocabulary; its errors name the line")
    {
        TempDir dir;
        const std::string base = prewarm_command("--dry-run --arch sm_80 --policy original ");
        if (base.empty()) {
            return;
        }
        std::ofstream(dir / "model.txt") << "# qkv, gate+up, down of one layer\n"
                                            "4096,6144,1,32   # qkv\n"
                                            "\n"
                                            "--shape 4096,11008 --gate-up --rmsnorm\n"
                                            "11008,4096 --bits 8 --zero-points\n";
        const test::CommandResult file = test::run_command(base + "--shapes " + (dir / "model.txt"));
        INFO(file.output);
        REQUIRE(file.exit_code == 0);
        CHECK(file.output.find("3 node(s)") != std::string::npos);
        CHECK(file.output.find("model.txt:4") != std::string::npos);

        const test::CommandResult same = test::run_command(
            base + "--shape 4096,6144,1,32 --shape 11008,4096 --bits 8 --zero-points");
        std::set<std::string> from_file = dry_run_lines(file.output);
        for (const std::string& line : dry_run_lines(same.output)) {
            CHECK(from_file.count(line) == 1);  // the gate/up node adds its own
        }

        std::ofstream(dir / "bad.txt") << "4096,6144\n4096,6144 --bits 5\n";
        const test::CommandResult bad = test::run_command(base + "--shapes " + (dir / "bad.txt"));
        CHECK(bad.exit_code == 2);
        CHECK(bad.output.find("bad.txt:2: --bits 5: expected 4 or 8") != std::string::npos);
        std::ofstream(dir / "empty.txt") << "# nothing\n";
        const test::CommandResult empty = test::run_command(base + "--shapes " + (dir / "empty.txt"));
        CHECK(empty.exit_code == 2);
        CHECK(empty.output.find("names no node") != std::string::npos);
    }

    TEST_CASE("a node the planner rejects is reported with its origin and fails the run")
    {
        const std::string base = prewarm_command("--dry-run --arch sm_90 ");
        if (base.empty()) {
            return;
        }
        // The RMS-norm prologue needs K % 128 == 0.
        const test::CommandResult result = test::run_command(base + "--shape 4000,4096 --rmsnorm");
        INFO(result.output);
        CHECK(result.exit_code == 1);
        CHECK(result.output.find("FAILED: --shape 4000,4096") != std::string::npos);
        CHECK(result.output.find("cannot be planned on NVIDIA H200") != std::string::npos);

        const test::CommandResult unmodelled = test::run_command(base + "--arch sm_75 --shape 4096,4096");
        CHECK(unmodelled.exit_code == 2);
        CHECK(unmodelled.output.find("no model of a sm_75 GPU") != std::string::npos);
    }

    TEST_CASE("prewarmed model-shape images are the ones a runtime looks up for the node's steps")
    {
        TempDir dir;
        const std::string command = prewarm_command("--cache-dir " + dir.path() + " --arch sm_80 --shape 256,512");
        if (command.empty()) {
            return;
        }
        const test::CommandResult result = test::run_command(command);
        INFO(result.output);
        REQUIRE(result.exit_code == 0);
        test::Problem p = test::problem(test::node(256, 512), {}, Capabilities::a100());
        jit::DiskCache cache(dir.path(), jit::kDefaultCacheMaxBytes);
        std::set<std::string> images;
        for (KernelPolicy policy : {KernelPolicy::Original, KernelPolicy::Fastest}) {
            p.context.policy = policy;
            for (const ops::PlanStep& step : p.plan().steps) {
                if (const auto* kernel = std::get_if<ops::KernelStep>(&step)) {
                    CAPTURE(kernel->entry);
                    const jit::ImageKey key = runtime_key(kernel->source, kernel->entry, CompileGranularity::Entry,
                                                          jit::Target::cubin(8, 0), kernel->defines);
                    CHECK(cache.load(key).has_value());
                    images.insert(key.digest());
                }
            }
        }
        CHECK_FALSE(images.empty());
        CHECK(cache.scan().size() == images.size());
    }
}

#include "options.hpp"
#include "runtime/internals.hpp"

#include "command_line.hpp"


namespace nbits::startup {
namespace {

tools::CommandLine command_line(StartupOptions& options)
{
    tools::CommandLine cli(
        "nbits-startup [--repeat N] [--hits N] [--device N] [--work-dir DIR] [--json] [--json-out FILE]\n"
        "       nbits-startup --compile-only [--repeat N]",
        "Measures how long a fresh process takes to get the launchable functions of one transformer decode\n"
        "step (matmul_nbits_gemv_f16_scales_f16, _gate_up_swiglu, _scales_f16_down_c2): with an empty disk\n"
        "cache (per-entry and whole-source compiles), with a prewarmed cache, and with the PTX a cold run\n"
        "left; and the in-process lookup once loaded. Each mode runs in fresh child processes, with the\n"
        "driver's own JIT cache off (CUDA_CACHE_DISABLE=1). Needs a GPU, except --compile-only, which times\n"
        "the NVRTC part of a cold start (per entry vs whole source) on any machine.\n"
        "Exit codes: 0 measured, 1 a measurement failed, 2 usage error, 3 no GPU.");
    cli.option("repeat", "N", "fresh processes (or compiles) per mode; the median is reported. Default 5",
               [&](const std::string& value) { options.repeats = static_cast<int>(tools::parse_integer(value, 1, 1000)); });
    cli.option("hits", "N", "runtime.internals().function() lookups timed in process. Default 1000000",
               [&](const std::string& value) { options.hits = tools::parse_integer(value, 1, 1'000'000'000); });
    cli.option("device", "N", "the GPU ordinal. Default 0",
               [&](const std::string& value) { options.device = static_cast<int>(tools::parse_integer(value, 0, 1024)); });
    cli.option("work-dir", "DIR", "where the scratch cache directories go (removed afterwards). Default $TMPDIR or /tmp",
               [&](const std::string& value) { options.work_dir = value; });
    cli.flag("compile-only", "time NVRTC alone (no GPU needed): one entry vs its whole source", &options.compile_only);
    cli.flag("json", "print JSON instead of the table", &options.json);
    cli.option("json-out", "FILE", "also write the JSON to FILE", [&](const std::string& value) { options.json_out = value; });
    cli.flag("help", "this text", &options.help);
    cli.section("Internal: the measured child process (nbits-startup spawns itself)");
    cli.flag("child", "run as the measured child", &options.child);
    cli.option("cache-dir", "DIR", "the child's disk cache", [&](const std::string& value) {
        options.child_options.cache_dir = value;
    });
    cli.option("granularity", "entry|source", "the child's compile granularity", [&](const std::string& value) {
        const std::optional<CompileGranularity> granularity = parse_granularity(value);
        if (!granularity) {
            throw tools::UsageError("expected entry or source");
        }
        options.child_options.granularity = *granularity;
    });
    cli.option("spawned-at-ns", "NS", "the parent's CLOCK_MONOTONIC at spawn", [&](const std::string& value) {
        options.child_options.spawned_at_ns = tools::parse_integer(value, 0);
    });
    cli.option("child-hits", "N", "lookups the child times after loading", [&](const std::string& value) {
        options.child_options.hits = tools::parse_integer(value, 0);
    });
    return cli;
}

}  // namespace

StartupOptions parse_options(int argc, char** argv)
{
    StartupOptions options;
    command_line(options).parse(argc, argv);
    if (options.child && options.child_options.cache_dir.empty()) {
        throw tools::UsageError("--child needs --cache-dir");
    }
    return options;
}

std::string help_text()
{
    StartupOptions options;
    return command_line(options).help();
}

}  // namespace nbits::startup

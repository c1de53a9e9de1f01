#include "options.hpp"

#include "command_line.hpp"

#include "nbits/error.hpp"
#include "jit/disk_cache.hpp"
#include "kernels.hpp"

namespace nbits::prewarm {
namespace {

CompileGranularity granularity_from(const std::string& text)
{
    if (auto granularity = parse_granularity(text)) {
        return *granularity;
    }
    throw tools::UsageError("expected entry or source");
}

tools::CommandLine command_line(PrewarmOptions& options, bool& list, bool& verify, bool& clear, bool& help)
{
    tools::CommandLine cli(
        "nbits-prewarm [--arch LIST] [--cache-dir DIR] [--jobs N] [--granularity entry|source] "
        "[--list | --verify | --clear] [--json]",
        "Compiles every embedded MatMulNBits kernel into the nbits disk cache, so that the first launch in a\n"
        "process loads an image instead of running NVRTC. Needs no GPU.\n"
        "Exit codes: 0 all well, 1 a compile failed or --verify found damaged images, 2 usage error.");
    cli.section("What to compile");
    cli.option("arch", "LIST",
               "comma-separated targets: sm_XY gives a CUBIN (what a runtime on that GPU loads first),\n"
               "compute_XY gives PTX. Default: the GPUs of this machine, else sm_90",
               [&](const std::string& value) {
                   for (const std::string& item : tools::split_list(value)) {
                       try {
                           options.targets.push_back(jit::Target::parse(item));
                       } catch (const Error& error) {
                           throw tools::UsageError(error.what());
                       }
                   }
               });
    cli.option("granularity", "entry|source",
               "one image per kernel entry (the runtime's default) or per source file; use what the\n"
               "runtime is configured with (RuntimeOptions::granularity). Default entry",
               [&](const std::string& value) { options.granularity = granularity_from(value); });
    cli.option("source", "LIST", "only these kernel sources (e.g. gemv_f16,gate_up_swiglu). Default: all",
               [&](const std::string& value) {
                   for (const std::string& name : tools::split_list(value)) {
                       try {
                           kernels::source(name);
                       } catch (const Error& error) {
                           throw tools::UsageError(error.what());
                       }
                       options.sources.push_back(name);
                   }
               });
    cli.option("jobs", "N", "parallel compiles. Default: the hardware threads",
               [&](const std::string& value) { options.jobs = static_cast<int>(tools::parse_integer(value, 1, 1024)); });
    cli.section("Where");
    cli.option("cache-dir", "DIR",
               "the cache directory. Default: where a runtime looks ($NBITS_CACHE_DIR, else\n"
               "$XDG_CACHE_HOME/nbits, else ~/.cache/nbits)",
               [&](const std::string& value) { options.cache_dir = value; });
    cli.option("max-bytes", "SIZE",
               "the cache's size bound while prewarming (e.g. 2G). Default: $NBITS_CACHE_MAX_BYTES, else 1G",
               [&](const std::string& value) {
                   options.max_bytes = jit::parse_byte_size(value);
                   if (!options.max_bytes) {
                       throw tools::UsageError("expected a byte count, optionally with a K, M or G suffix");
                   }
               });
    cli.section("Instead of compiling");
    cli.flag("list", "list the cached images: target, source, entries, NVRTC, size, last use", &list);
    cli.flag("verify", "check every cached image (header, key, checksum); remove and report damaged ones", &verify);
    cli.flag("clear", "remove every cached image", &clear);
    cli.section("Output");
    cli.flag("json", "print a JSON summary instead of the tables", &options.json);
    cli.option("json-out", "FILE", "also write the JSON summary to FILE",
               [&](const std::string& value) { options.json_out = value; });
    cli.flag("help", "this text", &help);
    return cli;
}

}  // namespace

PrewarmOptions parse_options(int argc, char** argv)
{
    PrewarmOptions options;
    bool list = false, verify = false, clear = false, help = false;
    command_line(options, list, verify, clear, help).parse(argc, argv);
    if (int(list) + int(verify) + int(clear) > 1) {
        throw tools::UsageError("--list, --verify and --clear exclude each other");
    }
    options.action = help     ? Action::Help
                     : list   ? Action::List
                     : verify ? Action::Verify
                     : clear  ? Action::Clear
                              : Action::Prewarm;
    return options;
}

std::string help_text()
{
    PrewarmOptions options;
    bool ignored = false;
    return command_line(options, ignored, ignored, ignored, ignored).help();
}

}  // namespace nbits::prewarm

// nbits-startup: how long a fresh process takes to get the decode step's
// launchable functions, cold and with the disk cache, and what a lookup
// costs once they are loaded.

#include "child.hpp"
#include "command_line.hpp"
#include "compile_measurement.hpp"
#include "gpu_measurement.hpp"
#include "options.hpp"
#include "startup_report.hpp"

#include "nbits/error.hpp"

#include <cstdio>
#include <fstream>

using namespace nbits;
using namespace nbits::startup;

namespace {

int report(const StartupOptions& options, const std::string& table, const std::string& json, int exit_code)
{
    std::fputs((options.json ? json : table).c_str(), stdout);
    if (!options.json_out.empty() && !(std::ofstream(options.json_out) << json)) {
        std::fprintf(stderr, "nbits-startup: cannot write %s\n", options.json_out.c_str());
        return kExitFailed;
    }
    return exit_code;
}

}  // namespace

int main(int argc, char** argv)
{
    StartupOptions options;
    try {
        options = parse_options(argc, argv);
    } catch (const tools::UsageError& error) {
        std::fprintf(stderr, "nbits-startup: %s\n", error.what());
        return kExitUsage;
    }
    if (options.help) {
        std::fputs(help_text().c_str(), stdout);
        return kExitOk;
    }
    try {
        if (options.child) {
            return run_child(options.child_options, options.device);
        }
        if (options.compile_only) {
            const CompileMeasurement measurement = measure_compiles(options);
            return report(options, compile_table(measurement), compile_json(measurement), kExitOk);
        }
        const GpuMeasurement measurement = measure_gpu(options);
        return report(options, gpu_table(measurement), gpu_json(measurement),
                      measurement.failed() ? kExitFailed : kExitOk);
    } catch (const Error& error) {
        if (error.kind() == ErrorKind::NoDriver || error.kind() == ErrorKind::NoDevice) {
            std::fprintf(stderr,
                         "nbits-startup: needs a GPU: %s\n(--compile-only measures the NVRTC part without one)\n",
                         error.what());
            return kExitNoGpu;
        }
        std::fprintf(stderr, "nbits-startup: %s\n", error.what());
        return kExitFailed;
    } catch (const std::exception& error) {
        std::fprintf(stderr, "nbits-startup: %s\n", error.what());
        return kExitFailed;
    }
}

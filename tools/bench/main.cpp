// nbits-bench: decode and prefill timings of MatMulNBits on real model shapes
// under every kernel policy, against the device's read ceiling and cuBLASLt
// dense of the same dtype measured in the same run; the host overhead of an
// eager run() beside bare launches of its steps; plans without timing.
//
// Exit status:
//   0  every row ran (or was unsupported by its policy) and passed its check;
//      --list, --help, and --from-json once rendered
//   1  a row failed: its output check, an operator error, a timing error, or
//      with --host-overhead bare launches that wrote other bytes than run()
//      and failed the check; with --plan, a node the planner rejected (other
//      than unsupported)
//   2  bad usage
//   3  no usable GPU (--plan, --list, --help and --from-json need none)
//   4  the run itself failed: runtime creation, reading --from-json, writing
//      --out or --plot

#include "bench.hpp"
#include "command_line.hpp"

#include "cuda/driver.hpp"
#include "nbits/error.hpp"

#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

namespace {

constexpr int kExitRowFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNoGpu = 3;
constexpr int kExitFatal = 4;

bool write_file(const std::string& path, const std::string& text)
{
    std::ofstream file(path, std::ios::binary);
    file << text;
    file.close();
    if (!file) {
        std::cerr << "nbits-bench: could not write " << path << "\n";
        return false;
    }
    return true;
}

// The report to stdout and, with --out, to a file; the SVG to --plot.
int emit(const nbits::bench::BenchOptions& options, const std::string& text, const std::string& svg, int status)
{
    std::cout << text << std::flush;
    if (!options.out_path.empty() && !write_file(options.out_path, text)) {
        return kExitFatal;
    }
    if (!options.plot_path.empty()) {
        if (!write_file(options.plot_path, svg)) {
            return kExitFatal;
        }
        std::cerr << "nbits-bench: wrote " << options.plot_path << "\n";
    }
    return status;
}

bool means_no_gpu(nbits::ErrorKind kind)
{
    return kind == nbits::ErrorKind::NoDriver || kind == nbits::ErrorKind::NoDevice ||
           kind == nbits::ErrorKind::UnsupportedDevice;
}

int from_json(const nbits::bench::BenchOptions& options)
{
    using namespace nbits::bench;
    std::ifstream file(options.from_json_path, std::ios::binary);
    if (!file) {
        std::cerr << "nbits-bench: could not read " << options.from_json_path << "\n";
        return kExitFatal;
    }
    std::ostringstream text;
    text << file.rdbuf();
    Report report;
    try {
        report = parse_report(text.str());
    } catch (const std::exception& error) {
        std::cerr << "nbits-bench: " << options.from_json_path << ": " << error.what() << "\n";
        return kExitFatal;
    }
    return emit(options, render_report(options.format, report),
                options.plot_path.empty() ? "" : render_svg(report), 0);
}

}  // namespace

int main(int argc, char** argv)
{
    using namespace nbits::bench;
    BenchOptions options;
    try {
        options = parse_options(argc, argv);
    } catch (const nbits::tools::UsageError& error) {
        std::cerr << "nbits-bench: " << error.what() << "\n";
        return kExitUsage;
    }
    if (options.help) {
        std::cout << help_text();
        return 0;
    }
    if (options.list) {
        std::cout << describe_shape_sets();
        return 0;
    }
    if (options.mode == Mode::FromJson) {
        return from_json(options);
    }
    if (options.mode == Mode::Plan) {
        try {
            int failed = 0;
            const std::string plans = render_plans(options, failed);
            return emit(options, plans, "", failed > 0 ? kExitRowFailed : 0);
        } catch (const std::exception& error) {
            std::cerr << "nbits-bench: " << error.what() << "\n";
            return kExitFatal;
        }
    }

    std::string why;
    if (!nbits::cuda::driver_available(&why)) {
        std::cerr << "nbits-bench: no CUDA GPU: " << why << "\n";
        return kExitNoGpu;
    }
    try {
        nbits::RuntimeOptions runtime_options;
        runtime_options.device = options.device;
        const auto runtime = std::make_shared<nbits::CudaRuntime>(runtime_options);
        const Report report = options.mode == Mode::HostOverhead ? run_host_overhead(runtime, options)
                                                                  : run_timing(runtime, options);
        return emit(options, render_report(options.format, report),
                    options.plot_path.empty() ? "" : render_svg(report),
                    report.failed() > 0 ? kExitRowFailed : 0);
    } catch (const nbits::Error& error) {
        std::cerr << "nbits-bench: " << error.what() << "\n";
        return means_no_gpu(error.kind()) ? kExitNoGpu : kExitFatal;
    } catch (const std::exception& error) {
        std::cerr << "nbits-bench: " << error.what() << "\n";
        return kExitFatal;
    }
}

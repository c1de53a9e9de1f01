// nbits-bench: decode and prefill throughput of MatMulNBits on real model
// shapes, against the device's read ceiling and cuBLASLt fp16 dense.
//
// Exit status: 0 every shape passed its check and was timed; 1 a shape
// failed (check, operator error, or --plan rejected it); 2 bad usage; 3 no
// usable GPU; 4 the run itself failed (runtime creation, writing --out).

#include "command_line.hpp"
#include "options.hpp"
#include "plan_dump.hpp"
#include "run_bench.hpp"

#include "cuda/driver.hpp"
#include "nbits/error.hpp"

#include <fstream>
#include <iostream>
#include <memory>

namespace {

constexpr int kExitShapeFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNoGpu = 3;
constexpr int kExitFatal = 4;

// The report to stdout and, with --out, to a file as well.
int emit(const std::string& report, const nbits::bench::BenchOptions& options, int status)
{
    std::cout << report << std::flush;
    if (!options.out_path.empty()) {
        std::ofstream file(options.out_path, std::ios::binary);
        file << report;
        file.close();
        if (!file) {
            std::cerr << "nbits-bench: could not write " << options.out_path << "\n";
            return kExitFatal;
        }
    }
    return status;
}

bool means_no_gpu(nbits::ErrorKind kind)
{
    return kind == nbits::ErrorKind::NoDriver || kind == nbits::ErrorKind::NoDevice ||
           kind == nbits::ErrorKind::UnsupportedDevice;
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
    const std::vector<BenchShape> shapes = options.shapes();
    if (options.plan_only) {
        int failed = 0;
        const std::string plans = render_plans(options, shapes, failed);
        return emit(plans, options, failed > 0 ? kExitShapeFailed : 0);
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
        const BenchOutcome outcome = run_benchmarks(runtime, options, shapes);
        return emit(outcome.report, options, outcome.failed_shapes > 0 ? kExitShapeFailed : 0);
    } catch (const nbits::Error& error) {
        std::cerr << "nbits-bench: " << error.what() << "\n";
        return means_no_gpu(error.kind()) ? kExitNoGpu : kExitFatal;
    } catch (const std::exception& error) {
        std::cerr << "nbits-bench: " << error.what() << "\n";
        return kExitFatal;
    }
}

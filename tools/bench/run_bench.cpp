#include "run_bench.hpp"

#include "ceiling.hpp"
#include "device.hpp"
#include "measure.hpp"
#include "report.hpp"

#include "nbits/error.hpp"

#include <fmt/format.h>

#include <chrono>
#include <iostream>
#include <random>

namespace nbits::bench {
namespace {

// Used when the driver reports no L2 size: larger than any current GPU's, so
// the rotation still leaves L2.
constexpr std::size_t kAssumedL2Bytes = std::size_t{128} << 20;

std::uint64_t fresh_seed()
{
    std::random_device device;
    return (static_cast<std::uint64_t>(device()) << 32) ^ device() ^
           static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
}

std::string progress_line(const ShapeResult& r)
{
    const std::string where = fmt::format("{} M={} K={} N={}", r.shape.label(), r.shape.m, r.shape.k, r.shape.n);
    if (r.failed()) {
        return fmt::format("{}: FAILED: {}", where, r.error);
    }
    std::string line = fmt::format("{}: {} {:.2f} us ({} x{}, {} copies), error {:.1e}", where, r.variant,
                                   r.timing->per_launch_us.median, r.timing->method, r.timing->launches,
                                   r.timing->copies, r.check->max_error);
    if (r.cublas) {
        line += fmt::format(", cuBLASLt fp16 {:.2f} us", r.cublas->timing.per_launch_us.median);
    }
    return line;
}

// After a failed shape, whether the context still works: an illegal address
// poisons it for good, and every later shape would fail the same way.
bool context_usable(CudaRuntime& runtime, std::string& why)
{
    try {
        runtime.synchronize();
        return true;
    } catch (const std::exception& error) {
        why = error.what();
        return false;
    }
}

}  // namespace

BenchOutcome run_benchmarks(const std::shared_ptr<CudaRuntime>& runtime, const BenchOptions& options,
                            const std::vector<BenchShape>& shapes)
{
    RunInfo run;
    run.device = read_device_facts(*runtime);
    run.path = options.path;
    run.seed = options.seed ? *options.seed : fresh_seed();
    run.cublas = options.cublas;
    run.method.warmups = options.warmups;
    run.method.decode_repeats = options.decode_repeats();
    run.method.prefill_repeats = options.prefill_repeats();
    run.method.min_graph_launches = static_cast<std::size_t>(options.min_graph_launches);
    run.method.max_weight_bytes = options.max_weight_bytes;
    run.method.l2_bytes = run.device.l2_bytes;
    if (run.method.l2_bytes == 0) {
        std::cerr << "nbits-bench: the driver reports no L2 size; rotating weights as if it were 128 MiB\n";
        run.method.l2_bytes = kAssumedL2Bytes;
    }
    std::cerr << fmt::format("nbits-bench: {} ({} SMs, L2 {} MiB), {} shapes, seed {}\n", run.device.name,
                             run.device.multiprocessors, run.device.l2_bytes >> 20, shapes.size(), run.seed);

    try {
        run.ceiling = measure_read_ceiling(*runtime, run.device, run.method.warmups, run.method.decode_repeats);
        std::cerr << fmt::format("nbits-bench: read ceiling {:.0f} GB/s\n", run.ceiling.gbps);
    } catch (const std::exception& error) {
        // Without it only %read is missing; every other column still stands.
        std::cerr << "nbits-bench: the read-ceiling measurement failed, %read will be empty: " << error.what() << "\n";
    }

    BenchContext context{runtime, options.path, run.method, options.cublas, run.seed};
    std::vector<ShapeResult> results;
    BenchOutcome outcome;
    std::string broken;
    for (std::size_t i = 0; i < shapes.size(); ++i) {
        ShapeResult result;
        if (!broken.empty()) {
            result.shape = shapes[i];
            result.error = "not run: the CUDA context failed earlier: " + broken;
        } else {
            result = measure_shape(context, shapes[i]);
            if (result.failed()) {
                context_usable(*runtime, broken);
            }
        }
        std::cerr << fmt::format("[{}/{}] {}\n", i + 1, shapes.size(), progress_line(result));
        outcome.failed_shapes += result.failed() ? 1 : 0;
        results.push_back(std::move(result));
    }
    outcome.report = render_report(options.format, run, results);
    return outcome;
}

}  // namespace nbits::bench

#include "measure.hpp"

#include "host_data.hpp"
#include "node.hpp"
#include "workload.hpp"

#include "nbits/error.hpp"
#include "nbits/matmul_nbits.hpp"

#include <type_traits>

namespace nbits::bench {
namespace {

std::vector<std::string> step_names(const ops::LaunchPlan& plan)
{
    std::vector<std::string> names;
    for (const ops::PlanStep& step : plan.steps) {
        names.push_back(std::visit(
            [](const auto& s) -> std::string {
                if constexpr (std::is_same_v<std::decay_t<decltype(s)>, ops::KernelStep>) {
                    return s.entry;
                } else {
                    return "cublasLt";
                }
            },
            step));
    }
    return names;
}

void measure_nbits(const BenchContext& context, const Node& node, ShapeResult& result)
{
    CudaRuntime& runtime = *context.runtime;
    const BenchShape& shape = node.shape;
    const HostData host(node, shape_seed(context.seed, shape));
    const Rotation rotation = context.method.rotation(runtime, rotated_bytes_per_copy(node), shape.decode());
    const DeviceNode device(runtime, host, rotation.copies);
    ops::MatMulNBits op(context.runtime, node.attributes);

    // The eager run JIT-compiles every entry the path needs, so no compile
    // lands in a capture or a timed sample; it is also the run the check reads.
    device.poison_output(runtime);
    const ops::LaunchPlan plan = *op.run(device.inputs(0), device.outputs());
    runtime.synchronize();
    result.variant = plan.variant;
    result.reason = plan.reason();
    result.steps = step_names(plan);
    result.capture_safe = plan.capture_safe;

    result.check = check_output(runtime, host, device.output());
    if (!result.check->passed) {
        result.error = "output check failed: " + result.check->summary;
        return;
    }

    auto enqueue = [&](std::size_t index) { op.run(device.inputs(index), device.outputs()); };
    std::string note;
    result.timing = time_launches(runtime, enqueue, shape.decode(), plan.capture_safe, rotation, context.method, &note);
    for (const std::string& line : {note, rotation.shortfall()}) {
        if (!line.empty()) {
            result.notes.push_back(line);
        }
    }
}

}  // namespace

double ShapeResult::gbps() const
{
    if (!timing || timing->per_launch_us.median <= 0.0) {
        return 0.0;
    }
    return static_cast<double>(bytes) / (timing->per_launch_us.median * 1e3);
}

double ShapeResult::tflops() const
{
    if (!timing || timing->per_launch_us.median <= 0.0) {
        return 0.0;
    }
    return flops / (timing->per_launch_us.median * 1e6);
}

std::optional<double> ShapeResult::speedup_over_cublas() const
{
    if (!timing || !cublas || timing->per_launch_us.median <= 0.0) {
        return std::nullopt;
    }
    return cublas->timing.per_launch_us.median / timing->per_launch_us.median;
}

ShapeResult measure_shape(const BenchContext& context, const BenchShape& shape)
{
    ShapeResult result;
    result.shape = shape;
    try {
        const Node node = make_node(shape, context.path);
        result.bytes = node.minimum_bytes();
        result.flops = node.flops();
        // nbits' buffers are gone before the baseline allocates its own.
        measure_nbits(context, node, result);
    } catch (const std::exception& error) {
        result.error = error.what();
    }
    if (!context.cublas || result.failed()) {
        return result;
    }
    try {
        result.cublas = time_cublas_f16(*context.runtime, shape.m, shape.k, shape.weight_columns(), context.method,
                                        shape_seed(context.seed, shape) ^ 0xC0B1A5ull);
    } catch (const std::exception& error) {
        // The nbits numbers stand on their own; the missing peer is reported.
        result.notes.push_back(std::string("cuBLASLt baseline failed: ") + error.what());
    }
    return result;
}

}  // namespace nbits::bench

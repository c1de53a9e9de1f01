#include "plan_dump.hpp"
#include "runtime/internals.hpp"

#include "csv.hpp"
#include "json_writer.hpp"
#include "node.hpp"

#include "cuda/driver.hpp"
#include "nbits/error.hpp"
#include "nbits/matmul_nbits.hpp"
#include "nbits/runtime.hpp"

#include <fmt/format.h>

#include <iostream>
#include <optional>

namespace nbits::bench {
namespace {

struct PlanOutcome {
    BenchShape shape;
    std::optional<ops::LaunchPlan> plan;
    std::string error;
};

ops::PlanContext plan_context(const BenchOptions& options)
{
    ops::PlanContext context;
    context.overrides = ops::PlanOverrides::from_environment();
    std::string why;
    if (cuda::driver_available(&why)) {
        try {
            RuntimeOptions runtime_options;
            runtime_options.device = options.device;
            const CudaRuntime runtime(runtime_options);
            context.capabilities = runtime.capabilities();
            context.half_headers_available = !runtime.internals().include_dirs().empty();
            return context;
        } catch (const Error& error) {
            why = error.what();
        }
    }
    std::cerr << "nbits-bench: no usable CUDA GPU, planning for an H200 (sm_90, 132 SMs): " << why << "\n";
    context.capabilities = Capabilities::h200();
    return context;
}

std::string steps_text(const ops::LaunchPlan& plan)
{
    std::string text;
    for (const ops::PlanStep& step : plan.steps) {
        const auto* kernel = std::get_if<ops::KernelStep>(&step);
        text += (text.empty() ? "" : ";") + (kernel ? kernel->entry : std::string("cublasLt"));
    }
    return text;
}

std::string render(OutputFormat format, const std::vector<PlanOutcome>& outcomes)
{
    if (format == OutputFormat::Json) {
        JsonWriter json;
        json.begin_array();
        for (const PlanOutcome& o : outcomes) {
            json.begin_object()
                .field("label", o.shape.label())
                .field("m", o.shape.m)
                .field("k", o.shape.k)
                .field("n", o.shape.n);
            if (o.plan) {
                json.key("plan").rendered(o.plan->to_json());
            } else {
                json.field("error", o.error);
            }
            json.end_object();
        }
        json.end_array();
        return json.str();
    }
    if (format == OutputFormat::Csv) {
        std::string text = tools::csv_line({"label", "m", "k", "n", "variant", "capture_safe", "steps", "error"});
        for (const PlanOutcome& o : outcomes) {
            text += tools::csv_line({o.shape.label(), std::to_string(o.shape.m), std::to_string(o.shape.k),
                                     std::to_string(o.shape.n), o.plan ? o.plan->variant : "",
                                     o.plan ? (o.plan->capture_safe ? "1" : "0") : "",
                                     o.plan ? steps_text(*o.plan) : "", o.error});
        }
        return text;
    }
    std::string text;
    for (const PlanOutcome& o : outcomes) {
        text += fmt::format("== {} M={} K={} N={}\n", o.shape.label(), o.shape.m, o.shape.k, o.shape.n);
        text += o.plan ? o.plan->describe() : "FAILED: " + o.error;
        text += text.back() == '\n' ? "\n" : "\n\n";
    }
    return text;
}

}  // namespace

std::string render_plans(const BenchOptions& options, const std::vector<BenchShape>& shapes, int& failed)
{
    const ops::PlanContext context = plan_context(options);
    std::vector<PlanOutcome> outcomes;
    failed = 0;
    for (const BenchShape& shape : shapes) {
        PlanOutcome outcome;
        outcome.shape = shape;
        try {
            const Node node = make_node(shape, options.path);
            const ops::MatMulNBitsConfig config = ops::MatMulNBitsConfig::from_attributes(node.attributes);
            outcome.plan = ops::plan_matmul_nbits(config, node.input_descs(), {node.output}, context);
        } catch (const std::exception& error) {
            outcome.error = error.what();
            ++failed;
        }
        outcomes.push_back(std::move(outcome));
    }
    return render(options.format, outcomes);
}

}  // namespace nbits::bench

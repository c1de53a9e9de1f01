#include "report.hpp"

#include "csv.hpp"
#include "json_writer.hpp"
#include "text_table.hpp"

#include "nbits/nbits.hpp"

#include <fmt/format.h>

#include <cmath>

namespace nbits::bench {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = kMiB * 1024.0;

// NaN when the ceiling could not be measured: the table shows "-", JSON null.
double percent_of_read(const RunInfo& run, double gbps)
{
    return run.ceiling.gbps > 0.0 ? 100.0 * gbps / run.ceiling.gbps : std::nan("");
}

std::string number_cell(double value, int decimals)
{
    return std::isfinite(value) ? fmt::format("{:.{}f}", value, decimals) : "-";
}

std::string method_cell(const Timing& timing)
{
    return timing.launches > 1 ? fmt::format("{} x{}", timing.method, timing.launches) : timing.method;
}

std::string describe_method(const Method& method)
{
    return fmt::format(
        "decode: median of {} CUDA-graph replays (>= {} launches each, after {} warm-ups), weights rotated over "
        ">= 4 x L2; prefill: median of {} eager runs after {} warm-ups; all timed work queued behind a device spin",
        method.decode_repeats, method.min_graph_launches, method.warmups, method.prefill_repeats, method.warmups);
}

std::string render_table(const RunInfo& run, const std::vector<ShapeResult>& results)
{
    const DeviceFacts& d = run.device;
    std::string text = fmt::format(
        "nbits-bench {} on {} (sm_{}{}, {} SMs, L2 {:.0f} MiB, {:.0f} GiB), driver {}.{}, NVRTC {}\n", version(),
        d.name, d.compute_major, d.compute_minor, d.multiprocessors, static_cast<double>(d.l2_bytes) / kMiB,
        static_cast<double>(d.total_memory) / kGiB, d.driver_version / 1000, d.driver_version % 1000 / 10,
        d.nvrtc_version);
    text += fmt::format("read ceiling: {:.0f} GB/s (streaming read of {:.0f} GiB, {})\n", run.ceiling.gbps,
                        static_cast<double>(run.ceiling.bytes) / kGiB, method_cell(run.ceiling.timing));
    text += fmt::format("path: {}   seed: {}\n", run.path.describe(), run.seed);
    text += describe_method(run.method) + "\n\n";

    tools::TextTable table;
    using Align = tools::TextTable::Align;
    table.column("shape", Align::Left);
    table.column("M");
    table.column("K");
    table.column("N");
    table.column("variant", Align::Left);
    table.column("timing", Align::Left);
    table.column("us");
    table.column("min");
    table.column("max");
    table.column("GB/s");
    table.column("%read");
    table.column("TFLOP/s");
    table.column("cuBLAS us");
    table.column("x cuBLAS");
    table.column("max err");
    for (const ShapeResult& r : results) {
        std::vector<std::string> cells = {r.shape.label(), std::to_string(r.shape.m), std::to_string(r.shape.k),
                                          std::to_string(r.shape.n)};
        if (r.failed()) {
            cells.push_back("FAILED (below)");
            table.row(cells);
            continue;
        }
        const Stats& us = r.timing->per_launch_us;
        cells.push_back(r.variant);
        cells.push_back(method_cell(*r.timing));
        cells.push_back(fmt::format("{:.2f}", us.median));
        cells.push_back(fmt::format("{:.2f}", us.min));
        cells.push_back(fmt::format("{:.2f}", us.max));
        cells.push_back(fmt::format("{:.0f}", r.gbps()));
        cells.push_back(number_cell(percent_of_read(run, r.gbps()), 1));
        cells.push_back(fmt::format("{:.2f}", r.tflops()));
        cells.push_back(r.cublas ? fmt::format("{:.2f}", r.cublas->timing.per_launch_us.median) : "-");
        const std::optional<double> speedup = r.speedup_over_cublas();
        cells.push_back(speedup ? fmt::format("{:.2f}", *speedup) : "-");
        cells.push_back(r.check ? fmt::format("{:.1e}", r.check->max_error) : "-");
        table.row(cells);
    }
    text += table.render();

    std::string notes;
    std::string failures;
    for (const ShapeResult& r : results) {
        const std::string where = fmt::format("{} M={}", r.shape.label(), r.shape.m);
        for (const std::string& note : r.notes) {
            notes += fmt::format("  {}: {}\n", where, note);
        }
        if (r.cublas && !r.cublas->note.empty()) {
            notes += fmt::format("  {} (cuBLASLt): {}\n", where, r.cublas->note);
        }
        if (r.failed()) {
            failures += fmt::format("  {} K={} N={}: {}\n", where, r.shape.k, r.shape.n, r.error);
        }
    }
    if (!notes.empty()) {
        text += "\nnotes:\n" + notes;
    }
    if (!failures.empty()) {
        text += "\nFAILED shapes:\n" + failures;
    }
    return text;
}

void write_stats(JsonWriter& json, const Timing& timing)
{
    const Stats& us = timing.per_launch_us;
    json.field("method", timing.method)
        .field("launches", timing.launches)
        .field("copies", timing.copies)
        .field("median_us", us.median)
        .field("min_us", us.min)
        .field("max_us", us.max);
    json.key("samples_us").begin_array();
    for (double sample : us.samples) {
        json.value(sample);
    }
    json.end_array();
}

std::string render_json(const RunInfo& run, const std::vector<ShapeResult>& results)
{
    JsonWriter json;
    json.begin_object();
    json.field("tool", "nbits-bench").field("version", version());
    const DeviceFacts& d = run.device;
    json.key("device").begin_object()
        .field("name", d.name)
        .field("compute_capability", fmt::format("{}.{}", d.compute_major, d.compute_minor))
        .field("multiprocessors", d.multiprocessors)
        .field("l2_bytes", d.l2_bytes)
        .field("total_memory", d.total_memory)
        .field("driver_version", d.driver_version)
        .field("nvrtc_version", d.nvrtc_version)
        .end_object();
    json.key("read_ceiling").begin_object().field("gbps", run.ceiling.gbps).field("bytes", run.ceiling.bytes);
    write_stats(json, run.ceiling.timing);
    json.end_object();
    const PathConfig& p = run.path;
    json.key("path").begin_object()
        .field("activation", to_string(p.activation))
        .field("scales", to_string(p.scales))
        .field("bits", p.bits)
        .field("block_size", p.block_size)
        .field("zero_points", p.zero_points)
        .field("accuracy_level", p.accuracy_level)
        .field("bias", to_string(p.bias))
        .field("rmsnorm_prologue", p.rmsnorm_prologue)
        .field("rmsnorm_epsilon", static_cast<double>(p.rmsnorm_epsilon))
        .end_object();
    json.field("method", describe_method(run.method)).field("seed", run.seed).field("cublas", run.cublas);

    json.key("results").begin_array();
    for (const ShapeResult& r : results) {
        json.begin_object()
            .field("model", r.shape.model)
            .field("projection", to_string(r.shape.projection))
            .field("label", r.shape.label())
            .field("m", r.shape.m)
            .field("k", r.shape.k)
            .field("n", r.shape.n)
            .field("weight_columns", r.shape.weight_columns())
            .field("status", r.failed() ? "failed" : "ok");
        if (r.failed()) {
            json.field("error", r.error);
        }
        if (!r.variant.empty()) {
            json.field("variant", r.variant).field("reason", r.reason).field("capture_safe", r.capture_safe);
            json.key("steps").begin_array();
            for (const std::string& step : r.steps) {
                json.value(step);
            }
            json.end_array();
        }
        json.field("bytes", r.bytes).field("flops", r.flops);
        if (r.check) {
            json.key("check").begin_object()
                .field("passed", r.check->passed)
                .field("max_error", r.check->max_error)
                .field("tolerance", r.check->tolerance)
                .field("values_checked", r.check->values_checked)
                .field("non_finite", r.check->non_finite)
                .end_object();
        }
        if (r.timing) {
            json.key("timing").begin_object();
            write_stats(json, *r.timing);
            json.end_object();
            json.field("gbps", r.gbps()).field("percent_of_read_ceiling", percent_of_read(run, r.gbps()))
                .field("tflops", r.tflops());
        }
        if (r.cublas) {
            json.key("cublas_f16").begin_object();
            write_stats(json, r.cublas->timing);
            const double gbps = static_cast<double>(r.cublas->bytes) / (r.cublas->timing.per_launch_us.median * 1e3);
            json.field("bytes", r.cublas->bytes).field("gbps", gbps);
            if (!r.cublas->note.empty()) {
                json.field("note", r.cublas->note);
            }
            json.end_object();
        }
        if (const std::optional<double> speedup = r.speedup_over_cublas()) {
            json.field("speedup_over_cublas", *speedup);
        }
        json.key("notes").begin_array();
        for (const std::string& note : r.notes) {
            json.value(note);
        }
        json.end_array();
        json.end_object();
    }
    json.end_array();
    json.end_object();
    return json.str();
}

std::string render_csv(const RunInfo& run, const std::vector<ShapeResult>& results)
{
    std::string text = tools::csv_line({"model", "projection", "m", "k", "n", "variant", "method", "launches", "copies",
                                        "median_us", "min_us", "max_us", "gbps", "percent_of_read_ceiling", "tflops",
                                        "cublas_median_us", "speedup_over_cublas", "max_error", "tolerance", "status",
                                        "error"});
    for (const ShapeResult& r : results) {
        std::vector<std::string> cells = {r.shape.model, to_string(r.shape.projection), std::to_string(r.shape.m),
                                          std::to_string(r.shape.k), std::to_string(r.shape.n), r.variant};
        if (r.timing) {
            const Stats& us = r.timing->per_launch_us;
            cells.insert(cells.end(),
                         {r.timing->method, std::to_string(r.timing->launches), std::to_string(r.timing->copies),
                          fmt::format("{:.3f}", us.median), fmt::format("{:.3f}", us.min),
                          fmt::format("{:.3f}", us.max), fmt::format("{:.1f}", r.gbps()),
                          number_cell(percent_of_read(run, r.gbps()), 2), fmt::format("{:.4f}", r.tflops())});
        } else {
            cells.insert(cells.end(), 9, "");
        }
        cells.push_back(r.cublas ? fmt::format("{:.3f}", r.cublas->timing.per_launch_us.median) : "");
        const std::optional<double> speedup = r.speedup_over_cublas();
        cells.push_back(speedup ? fmt::format("{:.3f}", *speedup) : "");
        cells.push_back(r.check ? fmt::format("{:.3e}", r.check->max_error) : "");
        cells.push_back(r.check ? fmt::format("{:.0e}", r.check->tolerance) : "");
        cells.push_back(r.failed() ? "failed" : "ok");
        cells.push_back(r.error);
        text += tools::csv_line(cells);
    }
    return text;
}

}  // namespace

std::string render_report(OutputFormat format, const RunInfo& run, const std::vector<ShapeResult>& results)
{
    switch (format) {
        case OutputFormat::Table: return render_table(run, results);
        case OutputFormat::Json: return render_json(run, results);
        case OutputFormat::Csv: return render_csv(run, results);
    }
    return "";
}

}  // namespace nbits::bench

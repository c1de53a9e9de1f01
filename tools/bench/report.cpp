// What a run found, for people (a table, an SVG) and for machines (JSON, CSV),
// and a saved JSON report read back so that any of them can be rendered again
// without a GPU.

#include "bench.hpp"

#include "csv.hpp"
#include "json_reader.hpp"
#include "json_writer.hpp"
#include "text_table.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <map>
#include <stdexcept>

namespace nbits::bench {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = kMiB * 1024.0;

double nan() { return std::nan(""); }

std::string cell(double value, int decimals)
{
    return std::isfinite(value) ? fmt::format("{:.{}f}", value, decimals) : "-";
}

std::string optional_cell(const std::optional<double>& value, int decimals)
{
    return value ? cell(*value, decimals) : "-";
}

double percent_of_read(const Report& report, double gbps)
{
    return report.ceiling && report.ceiling->gbps > 0.0 && gbps > 0.0 ? 100.0 * gbps / report.ceiling->gbps : nan();
}

std::optional<double> dense_us(const Row& row)
{
    if (row.dense && row.dense->timing && row.dense->timing->us.median > 0.0) {
        return row.dense->timing->us.median;
    }
    return std::nullopt;
}

double dense_gbps(const Dense& dense)
{
    return dense.timing && dense.timing->us.median > 0.0
               ? static_cast<double>(dense.bytes) / (dense.timing->us.median * 1e3)
               : nan();
}

double dense_tflops(const Row& row)
{
    const std::optional<double> us = dense_us(row);
    return us ? row.flops / (*us * 1e6) : nan();
}

// An --overrides row's median against its policy's row (no overrides) of the same node and M in the same
// report, in percent: negative where the overrides ran faster. None for a row without overrides, or where
// either row has no time.
std::optional<double> percent_against_plan(const Report& report, const Row& row)
{
    if (row.overrides.empty() || row.us() <= 0.0) {
        return std::nullopt;
    }
    const auto plan = std::find_if(report.rows.begin(), report.rows.end(), [&](const Row& r) {
        return r.overrides.empty() && r.policy == row.policy && r.shape.same_node(row.shape) &&
               r.shape.m == row.shape.m && r.us() > 0.0;
    });
    return plan == report.rows.end() ? std::nullopt : std::optional<double>(100.0 * (row.us() / plan->us() - 1.0));
}

// A line per --overrides set: how many of its rows ran faster and slower than the plan, and by how much.
std::string against_plan_summary(const Report& report)
{
    std::string text;
    for (const OverrideSet& set : report.override_sets) {
        std::vector<double> percents;
        std::size_t rows = 0;
        for (const Row& r : report.rows) {
            if (r.overrides != set.label) {
                continue;
            }
            ++rows;
            if (const std::optional<double> percent = percent_against_plan(report, r)) {
                percents.push_back(*percent);
            }
        }
        if (percents.empty()) {
            text += fmt::format("  +{}: none of its {} rows has a timed plan row beside it\n", set.label, rows);
            continue;
        }
        const auto faster = std::count_if(percents.begin(), percents.end(), [](double p) { return p < 0.0; });
        const auto slower = std::count_if(percents.begin(), percents.end(), [](double p) { return p > 0.0; });
        const Stats spread = summarize(percents);
        text += fmt::format("  +{}: {} of {} rows compared, faster on {}, slower on {}; {:+.1f}% to {:+.1f}%, "
                            "median {:+.1f}%\n",
                            set.label, percents.size(), rows, faster, slower, spread.min, spread.max, spread.median);
    }
    return text;
}

std::string timing_cell(const Timing& timing)
{
    return timing.launches > 1 ? fmt::format("{} x{}", timing.method, timing.launches) : timing.method;
}

std::string device_line(const Report& report)
{
    const DeviceFacts& d = report.device;
    const std::string clusters =
        d.clusters.empty() ? std::string() : fmt::format(" (clusters of 2/3/4 at once: {})", d.clusters);
    const std::string peak =
        d.memory_bandwidth_gb_per_s == 0 ? std::string() : fmt::format(", peak {} GB/s", d.memory_bandwidth_gb_per_s);
    return fmt::format("nbits-bench {} on {} (sm_{}{}, {} SMs{}, L2 {:.0f} MiB, {:.0f} GiB{}), driver {}.{}, NVRTC {}",
                       report.version, d.name, d.compute_major, d.compute_minor, d.multiprocessors, clusters,
                       static_cast<double>(d.l2_bytes) / kMiB, static_cast<double>(d.total_memory) / kGiB, peak,
                       d.driver_version / 1000, d.driver_version % 1000 / 10, d.nvrtc_version);
}

// "original,fastest", then a line per --overrides set.
std::string policies_text(const Report& report)
{
    std::string text;
    for (const KernelPolicy policy : report.policies) {
        text += (text.empty() ? "" : ",") + std::string(to_string(policy));
    }
    for (const OverrideSet& set : report.override_sets) {
        text += "\n" + set.describe();
    }
    return text;
}

// ------------------------------------------------------------------ table ---

std::string render_rows_table(const Report& report)
{
    std::string text = device_line(report) + "\n";
    if (report.ceiling) {
        text += fmt::format("read ceiling: {:.0f} GB/s (streaming read of {:.0f} GiB, {})\n", report.ceiling->gbps,
                            static_cast<double>(report.ceiling->bytes) / kGiB, timing_cell(report.ceiling->timing));
    } else {
        text += "read ceiling: not measured (%read is empty)\n";
    }
    text += fmt::format("path: {}   seed: {}   policies: {}\n", report.path.describe(), report.seed,
                        policies_text(report));
    text += report.method + "\n";
    text += "x dense = dense us / row us (above 1 the row beats cuBLASLt dense of the same dtype); check = max_abs "
            "against the oracle bound\n";
    const bool floors = std::any_of(report.rows.begin(), report.rows.end(), [](const Row& r) { return r.read_floor; });
    if (floors) {
        text += "%floor = a streaming read of the row's bytes, launched alike, over the row's time (--read-floor)\n";
    }
    text += "\n";

    tools::TextTable table;
    using Align = tools::TextTable::Align;
    for (const auto& [name, align] : std::vector<std::pair<const char*, Align>>{
             {"shape", Align::Left},  {"M", Align::Right},      {"K", Align::Right},       {"N", Align::Right},
             {"policy", Align::Left}, {"variant", Align::Left}, {"timing", Align::Left},   {"us", Align::Right},
             {"GB/s", Align::Right},  {"%read", Align::Right},  {"TFLOP/s", Align::Right}, {"dense us", Align::Right},
             {"x dense", Align::Right}, {"check", Align::Right}}) {
        table.column(name, align);
    }
    if (floors) {
        table.column("floor us", Align::Right);
        table.column("%floor", Align::Right);
    }
    const bool overridden = !report.override_sets.empty();
    if (overridden) {
        table.column("vs plan", Align::Right);
    }
    for (const Row& r : report.rows) {
        std::vector<std::string> cells = {r.shape.label(), std::to_string(r.shape.m), std::to_string(r.shape.k),
                                          std::to_string(r.shape.n), r.configuration().name()};
        if (r.status != Status::Ok) {
            cells.push_back(r.status == Status::Unsupported ? "unsupported (below)" : "FAILED (below)");
            table.row(cells);
            continue;
        }
        const bool decode = r.shape.decode();
        cells.push_back(r.variant);
        cells.push_back(timing_cell(*r.timing));
        cells.push_back(cell(r.us(), 2));
        cells.push_back(decode ? cell(r.gbps(), 0) : "");
        cells.push_back(decode ? cell(percent_of_read(report, r.gbps()), 1) : "");
        cells.push_back(decode ? "" : cell(r.tflops(), 2));
        cells.push_back(optional_cell(dense_us(r), 2));
        cells.push_back(optional_cell(r.ratio_to_dense(), 2));
        cells.push_back(r.check ? fmt::format("{:.1e}/{:.1e}", r.check->max_abs, r.check->bound) : "-");
        if (floors) {
            cells.push_back(r.read_floor ? cell(r.read_floor->us.median, 2) : "-");
            cells.push_back(optional_cell(r.percent_of_read_floor(), 1));
        }
        if (overridden) {
            const std::optional<double> percent = percent_against_plan(report, r);
            cells.push_back(percent ? fmt::format("{:+.1f}%", *percent) : "");
        }
        table.row(cells);
    }
    text += table.render();
    if (overridden) {
        text += "\nvs plan = the --overrides row's time over its policy's row of the same node and M, less 1:\n" +
                against_plan_summary(report);
    }

    std::string notes;
    std::string unsupported;
    std::string failures;
    for (const Row& r : report.rows) {
        const std::string where = fmt::format("{} M={} {}", r.shape.label(), r.shape.m, r.configuration().name());
        for (const std::string& note : r.notes) {
            notes += fmt::format("  {}: {}\n", where, note);
        }
        if (r.status == Status::Unsupported) {
            unsupported += fmt::format("  {}: {}\n", where, r.error);
        } else if (r.status == Status::Failed) {
            failures += fmt::format("  {} K={} N={}: {}\n", where, r.shape.k, r.shape.n, r.error);
        }
    }
    // Dense is shared by a shape's policies: say its notes once.
    std::map<std::string, std::string> dense_notes;
    for (const Row& r : report.rows) {
        if (r.dense && (!r.dense->note.empty() || !r.dense->error.empty())) {
            dense_notes[fmt::format("{} M={} (dense {})", r.shape.label(), r.shape.m, short_name(r.dense->dtype))] =
                r.dense->error.empty() ? r.dense->note : "failed: " + r.dense->error;
        }
    }
    for (const auto& [where, note] : dense_notes) {
        notes += fmt::format("  {}: {}\n", where, note);
    }
    if (!notes.empty()) {
        text += "\nnotes:\n" + notes;
    }
    if (!unsupported.empty()) {
        text += "\nunsupported (the policy has no kernel for the node):\n" + unsupported;
    }
    if (!failures.empty()) {
        text += "\nFAILED rows:\n" + failures;
    }
    if (report.wall_seconds > 0.0) {
        text += fmt::format("\n{} rows in {:.1f} s\n", report.rows.size(), report.wall_seconds);
    }
    return text;
}

std::string render_overhead_table(const Report& report)
{
    std::string text = device_line(report) + "\n";
    text += fmt::format("path: {}   policies: {}\n", report.path.describe(), policies_text(report));
    text += report.method + "\n";
    text += fmt::format("overhead = run - bare, host us per call; target: <= {:g} us above the bare launch\n\n",
                        kOverheadTargetUs);
    tools::TextTable table;
    using Align = tools::TextTable::Align;
    for (const auto& [name, align] : std::vector<std::pair<const char*, Align>>{
             {"shape", Align::Left},     {"M", Align::Right},       {"K", Align::Right},
             {"N", Align::Right},        {"policy", Align::Left},   {"variant", Align::Left},
             {"launches", Align::Right}, {"run us", Align::Right},  {"min", Align::Right},
             {"bare us", Align::Right},  {"min", Align::Right},     {"overhead us", Align::Right},
             {"target", Align::Left}}) {
        table.column(name, align);
    }
    std::string failures;
    std::string notes;
    for (const OverheadRow& r : report.overhead) {
        std::vector<std::string> cells = {r.shape.label(), std::to_string(r.shape.m), std::to_string(r.shape.k),
                                          std::to_string(r.shape.n), r.configuration().name()};
        const std::string where = fmt::format("{} M={} {}", r.shape.label(), r.shape.m, r.configuration().name());
        for (const std::string& note : r.notes) {
            notes += fmt::format("  {}: {}\n", where, note);
        }
        if (r.status != Status::Ok) {
            cells.push_back(r.status == Status::Unsupported ? "unsupported (below)" : "FAILED (below)");
            failures += fmt::format("  {}: {}: {}\n", where, to_string(r.status), r.error);
            table.row(cells);
            continue;
        }
        cells.insert(cells.end(), {r.variant, std::to_string(r.steps.size()), cell(r.run_us.median, 2),
                                   cell(r.run_us.min, 2), cell(r.bare_us.median, 2), cell(r.bare_us.min, 2),
                                   cell(r.overhead_us(), 2), r.overhead_us() <= kOverheadTargetUs ? "met" : "missed"});
        table.row(cells);
    }
    text += table.render();
    if (!notes.empty()) {
        text += "\nnotes:\n" + notes;
    }
    if (!failures.empty()) {
        text += "\nnot measured:\n" + failures;
    }
    return text;
}

// ------------------------------------------------------------------- JSON ---

void write_stats(JsonWriter& json, const Stats& stats, const char* unit)
{
    json.field(fmt::format("median_{}", unit), stats.median)
        .field(fmt::format("min_{}", unit), stats.min)
        .field(fmt::format("max_{}", unit), stats.max);
    json.key(fmt::format("samples_{}", unit)).begin_array();
    for (const double sample : stats.samples) {
        json.value(sample);
    }
    json.end_array();
}

void write_timing(JsonWriter& json, const Timing& timing)
{
    json.begin_object().field("method", timing.method).field("launches", timing.launches).field("copies", timing.copies);
    write_stats(json, timing.us, "us");
    json.end_object();
}

void write_check(JsonWriter& json, const Check& check)
{
    json.begin_object()
        .field("passed", check.passed)
        .field("max_abs", check.max_abs)
        .field("max_rel", check.max_rel)
        .field("max_out", check.max_out)
        .field("relative", check.relative)
        .field("bound", check.bound)
        .field("max_rel_limited", check.max_rel_limited)
        .field("values", check.values)
        .field("non_finite", check.non_finite)
        .end_object();
}

void write_strings(JsonWriter& json, const char* key, const std::vector<std::string>& strings)
{
    json.key(key).begin_array();
    for (const std::string& s : strings) {
        json.value(s);
    }
    json.end_array();
}

void write_shape(JsonWriter& json, const BenchShape& shape)
{
    json.field("model", shape.model)
        .field("projection", to_string(shape.projection))
        .field("label", shape.label())
        .field("m", shape.m)
        .field("k", shape.k)
        .field("n", shape.n)
        .field("weight_columns", shape.weight_columns())
        .field("regime", to_string(shape.regime));
}

// "policy", and "overrides" where a row ran under an --overrides set (older reports have none).
void write_configuration(JsonWriter& json, const Configuration& configuration)
{
    json.field("policy", to_string(configuration.policy));
    if (!configuration.overrides.empty()) {
        json.field("overrides", configuration.overrides);
    }
}

void write_row(JsonWriter& json, const Report& report, const Row& r)
{
    json.begin_object();
    write_shape(json, r.shape);
    write_configuration(json, r.configuration());
    json.field("status", to_string(r.status));
    if (!r.error.empty()) {
        json.field("error", r.error);
    }
    json.field("variant", r.variant).field("reason", r.reason).field("capture_safe", r.capture_safe);
    write_strings(json, "steps", r.steps);
    json.field("bytes", r.bytes).field("flops", static_cast<std::uint64_t>(r.flops));
    if (r.check) {
        json.key("check");
        write_check(json, *r.check);
    }
    if (r.timing) {
        json.key("timing");
        write_timing(json, *r.timing);
        json.field("gbps", r.gbps()).field("percent_of_read_ceiling", percent_of_read(report, r.gbps()));
        json.field("tflops", r.tflops());
    }
    if (r.dense) {
        json.key("dense").begin_object().field("dtype", short_name(r.dense->dtype)).field("bytes", r.dense->bytes);
        if (r.dense->timing) {
            json.key("timing");
            write_timing(json, *r.dense->timing);
            json.field("gbps", dense_gbps(*r.dense)).field("tflops", dense_tflops(r));
        }
        if (!r.dense->note.empty()) {
            json.field("note", r.dense->note);
        }
        if (!r.dense->error.empty()) {
            json.field("error", r.dense->error);
        }
        json.end_object();
    }
    if (const std::optional<double> ratio = r.ratio_to_dense()) {
        json.field("ratio_to_dense", *ratio);
    }
    if (r.read_floor) {
        json.key("read_floor");
        write_timing(json, *r.read_floor);
        if (const std::optional<double> percent = r.percent_of_read_floor()) {
            json.field("percent_of_read_floor", *percent);
        }
    }
    write_strings(json, "notes", r.notes);
    json.end_object();
}

void write_overhead_row(JsonWriter& json, const OverheadRow& r)
{
    json.begin_object();
    write_shape(json, r.shape);
    write_configuration(json, r.configuration());
    json.field("status", to_string(r.status));
    if (!r.error.empty()) {
        json.field("error", r.error);
    }
    json.field("variant", r.variant);
    write_strings(json, "steps", r.steps);
    if (r.check) {
        json.key("check");
        write_check(json, *r.check);
    }
    if (r.status == Status::Ok) {
        json.field("calls_per_batch", r.calls_per_batch).field("batches", r.batches);
        json.key("run").begin_object();
        write_stats(json, r.run_us, "us");
        json.end_object().key("bare").begin_object();
        write_stats(json, r.bare_us, "us");
        json.end_object();
        json.field("overhead_us", r.overhead_us())
            .field("target_us", kOverheadTargetUs)
            .field("within_target", r.overhead_us() <= kOverheadTargetUs);
    }
    write_strings(json, "notes", r.notes);
    json.end_object();
}

std::string render_json(const Report& report)
{
    JsonWriter json;
    json.begin_object()
        .field("tool", "nbits-bench")
        .field("version", report.version)
        .field("mode", report.mode == Mode::HostOverhead ? "host-overhead" : "timing");
    const DeviceFacts& d = report.device;
    json.key("device")
        .begin_object()
        .field("name", d.name)
        .field("compute_major", d.compute_major)
        .field("compute_minor", d.compute_minor)
        .field("multiprocessors", d.multiprocessors)
        .field("l2_bytes", d.l2_bytes)
        .field("total_memory", d.total_memory)
        .field("driver_version", d.driver_version)
        .field("nvrtc_version", d.nvrtc_version);
    if (!d.clusters.empty()) {
        json.field("clusters_a_cta_an_sm", d.clusters);  // absent where the runtime counted none
    }
    if (d.memory_bandwidth_gb_per_s > 0) {
        json.field("memory_bandwidth_gb_per_s", d.memory_bandwidth_gb_per_s);  // absent where the driver gave none
    }
    json.end_object();
    if (report.ceiling) {
        json.key("read_ceiling").begin_object().field("gbps", report.ceiling->gbps).field("bytes", report.ceiling->bytes);
        json.key("timing");
        write_timing(json, report.ceiling->timing);
        json.end_object();
    } else {
        json.key("read_ceiling").null();
    }
    const PathConfig& p = report.path;
    json.key("path")
        .begin_object()
        .field("activation", short_name(p.activation))
        .field("scales", short_name(p.scales))
        .field("bits", p.bits)
        .field("block_size", p.block_size)
        .field("zero_points", p.zero_points)
        .field("accuracy_level", p.accuracy_level)
        .field("bias", to_string(p.bias))
        .field("rmsnorm_prologue", p.rmsnorm_prologue)
        .field("rmsnorm_epsilon", static_cast<double>(p.rmsnorm_epsilon))
        .end_object();
    json.key("policies").begin_array();
    for (const KernelPolicy policy : report.policies) {
        json.value(to_string(policy));
    }
    json.end_array();
    if (!report.override_sets.empty()) {
        json.key("override_sets").begin_array();
        for (const OverrideSet& set : report.override_sets) {
            json.begin_object().field("label", set.label).key("variables").begin_object();
            for (const auto& [name, value] : set.variables) {
                json.field(name, value);
            }
            json.end_object().end_object();
        }
        json.end_array();
    }
    json.field("method", report.method).field("seed", report.seed).field("wall_seconds", report.wall_seconds);
    json.field("ratio_to_dense", "dense median us / row median us: above 1 the row beats cuBLASLt dense");
    json.key("results").begin_array();
    for (const Row& row : report.rows) {
        write_row(json, report, row);
    }
    json.end_array();
    json.key("host_overhead").begin_array();
    for (const OverheadRow& row : report.overhead) {
        write_overhead_row(json, row);
    }
    json.end_array();
    json.field("failed_rows", report.failed());
    json.end_object();
    return json.str();
}

// -------------------------------------------------------------------- CSV ---

std::string number(double value, int decimals) { return std::isfinite(value) ? fmt::format("{:.{}f}", value, decimals) : ""; }

std::string render_rows_csv(const Report& report)
{
    std::string text = tools::csv_line(
        {"model", "projection", "m", "k", "n", "regime", "policy", "overrides", "status", "variant", "method",
         "launches", "copies",
         "median_us", "min_us", "max_us", "gbps", "percent_of_read_ceiling", "tflops", "dense_dtype", "dense_median_us",
         "dense_gbps", "dense_tflops", "ratio_to_dense", "max_abs", "bound", "check_passed", "error", "read_floor_us",
         "percent_of_read_floor", "percent_against_plan"});
    for (const Row& r : report.rows) {
        std::vector<std::string> cells = {r.shape.model,      to_string(r.shape.projection), std::to_string(r.shape.m),
                                          std::to_string(r.shape.k), std::to_string(r.shape.n),
                                          to_string(r.shape.regime), to_string(r.policy),   r.overrides,
                                          to_string(r.status),       r.variant};
        if (r.timing) {
            const Stats& us = r.timing->us;
            cells.insert(cells.end(), {r.timing->method, std::to_string(r.timing->launches),
                                       std::to_string(r.timing->copies), number(us.median, 3), number(us.min, 3),
                                       number(us.max, 3), number(r.gbps(), 1),
                                       number(percent_of_read(report, r.gbps()), 2), number(r.tflops(), 4)});
        } else {
            cells.insert(cells.end(), 9, "");
        }
        cells.push_back(r.dense ? short_name(r.dense->dtype) : "");
        const std::optional<double> dense = dense_us(r);
        cells.push_back(dense ? number(*dense, 3) : "");
        cells.push_back(r.dense ? number(dense_gbps(*r.dense), 1) : "");
        cells.push_back(number(dense_tflops(r), 4));
        const std::optional<double> ratio = r.ratio_to_dense();
        cells.push_back(ratio ? number(*ratio, 3) : "");
        cells.push_back(r.check ? fmt::format("{:.3e}", r.check->max_abs) : "");
        cells.push_back(r.check ? fmt::format("{:.3e}", r.check->bound) : "");
        cells.push_back(r.check ? (r.check->passed ? "1" : "0") : "");
        cells.push_back(r.error);
        cells.push_back(r.read_floor ? number(r.read_floor->us.median, 3) : "");
        cells.push_back(r.percent_of_read_floor() ? number(*r.percent_of_read_floor(), 2) : "");
        const std::optional<double> against_plan = percent_against_plan(report, r);
        cells.push_back(against_plan ? number(*against_plan, 2) : "");
        text += tools::csv_line(cells);
    }
    return text;
}

std::string render_overhead_csv(const Report& report)
{
    std::string text = tools::csv_line({"model", "projection", "m", "k", "n", "policy", "overrides", "status",
                                        "variant", "launches",
                                        "calls_per_batch", "batches", "run_median_us", "run_min_us", "bare_median_us",
                                        "bare_min_us", "overhead_us", "within_target", "error"});
    for (const OverheadRow& r : report.overhead) {
        const bool ok = r.status == Status::Ok;
        text += tools::csv_line(
            {r.shape.model, to_string(r.shape.projection), std::to_string(r.shape.m), std::to_string(r.shape.k),
             std::to_string(r.shape.n), to_string(r.policy), r.overrides, to_string(r.status), r.variant,
             std::to_string(r.steps.size()), ok ? std::to_string(r.calls_per_batch) : "",
             ok ? std::to_string(r.batches) : "", ok ? number(r.run_us.median, 3) : "", ok ? number(r.run_us.min, 3) : "",
             ok ? number(r.bare_us.median, 3) : "", ok ? number(r.bare_us.min, 3) : "",
             ok ? number(r.overhead_us(), 3) : "", ok ? (r.overhead_us() <= kOverheadTargetUs ? "1" : "0") : "",
             r.error});
    }
    return text;
}

// -------------------------------------------------------------- read back ---

using tools::JsonValue;

const JsonValue& member(const JsonValue& object, const char* key)
{
    static const JsonValue null_value;
    const JsonValue* found = object.find(key);
    return found != nullptr ? *found : null_value;
}

Stats read_stats(const JsonValue& object, const char* unit)
{
    Stats stats;
    stats.median = member(object, fmt::format("median_{}", unit).c_str()).number(nan());
    stats.min = member(object, fmt::format("min_{}", unit).c_str()).number(nan());
    stats.max = member(object, fmt::format("max_{}", unit).c_str()).number(nan());
    for (const JsonValue& sample : member(object, fmt::format("samples_{}", unit).c_str()).items) {
        stats.samples.push_back(sample.number(nan()));
    }
    return stats;
}

std::optional<Timing> read_timing(const JsonValue& value)
{
    if (value.type != JsonValue::Type::Object) {
        return std::nullopt;
    }
    Timing timing;
    timing.method = member(value, "method").string();
    timing.launches = member(value, "launches").unsigned_integer();
    timing.copies = member(value, "copies").unsigned_integer(1);
    timing.us = read_stats(value, "us");
    return timing;
}

std::optional<Check> read_check(const JsonValue& value)
{
    if (value.type != JsonValue::Type::Object) {
        return std::nullopt;
    }
    Check check;
    check.passed = member(value, "passed").flag();
    check.max_abs = member(value, "max_abs").number(nan());
    check.max_rel = member(value, "max_rel").number(nan());
    check.max_out = member(value, "max_out").number(nan());
    check.relative = member(value, "relative").number(nan());
    check.bound = member(value, "bound").number(nan());
    check.max_rel_limited = member(value, "max_rel_limited").flag(true);
    check.values = member(value, "values").unsigned_integer();
    check.non_finite = member(value, "non_finite").unsigned_integer();
    return check;
}

std::vector<std::string> read_strings(const JsonValue& value)
{
    std::vector<std::string> strings;
    for (const JsonValue& item : value.items) {
        strings.push_back(item.string());
    }
    return strings;
}

BenchShape read_shape(const JsonValue& object)
{
    BenchShape shape;
    shape.model = member(object, "model").string("custom");
    const std::string projection = member(object, "projection").string("custom");
    shape.projection = projection == "custom" ? Projection::Custom : parse_projection(projection);
    shape.m = member(object, "m").unsigned_integer(1);
    shape.k = member(object, "k").unsigned_integer();
    shape.n = member(object, "n").unsigned_integer();
    shape.regime = member(object, "regime").string() == "prefill" ? Regime::Prefill : Regime::Decode;
    return shape;
}

KernelPolicy read_policy(const JsonValue& value)
{
    const std::optional<KernelPolicy> policy = parse_kernel_policy(value.string());
    if (!policy) {
        throw std::runtime_error("unknown policy '" + value.string() + "'");
    }
    return *policy;
}

Status read_status(const JsonValue& value)
{
    const std::string text = value.string();
    return text == "ok" ? Status::Ok : text == "unsupported" ? Status::Unsupported : Status::Failed;
}

Row read_row(const JsonValue& object)
{
    Row row;
    row.shape = read_shape(object);
    row.policy = read_policy(member(object, "policy"));
    row.overrides = member(object, "overrides").string();
    row.status = read_status(member(object, "status"));
    row.error = member(object, "error").string();
    row.variant = member(object, "variant").string();
    row.reason = member(object, "reason").string();
    row.capture_safe = member(object, "capture_safe").flag();
    row.steps = read_strings(member(object, "steps"));
    row.bytes = member(object, "bytes").unsigned_integer();
    row.flops = member(object, "flops").number();
    row.check = read_check(member(object, "check"));
    row.timing = read_timing(member(object, "timing"));
    const JsonValue& dense = member(object, "dense");
    if (dense.type == JsonValue::Type::Object) {
        Dense d;
        d.dtype = parse_float_dtype(member(dense, "dtype").string("f16"));
        d.bytes = member(dense, "bytes").unsigned_integer();
        d.timing = read_timing(member(dense, "timing"));
        d.note = member(dense, "note").string();
        d.error = member(dense, "error").string();
        row.dense = d;
    }
    row.read_floor = read_timing(member(object, "read_floor"));
    row.notes = read_strings(member(object, "notes"));
    return row;
}

OverheadRow read_overhead_row(const JsonValue& object)
{
    OverheadRow row;
    row.shape = read_shape(object);
    row.policy = read_policy(member(object, "policy"));
    row.overrides = member(object, "overrides").string();
    row.status = read_status(member(object, "status"));
    row.error = member(object, "error").string();
    row.variant = member(object, "variant").string();
    row.steps = read_strings(member(object, "steps"));
    row.check = read_check(member(object, "check"));
    row.calls_per_batch = member(object, "calls_per_batch").unsigned_integer();
    row.batches = member(object, "batches").unsigned_integer();
    row.run_us = read_stats(member(object, "run"), "us");
    row.bare_us = read_stats(member(object, "bare"), "us");
    row.notes = read_strings(member(object, "notes"));
    return row;
}

}  // namespace

// ------------------------------------------------------------------- rows ---

Stats summarize(std::vector<double> samples)
{
    Stats stats;
    stats.samples = samples;
    if (samples.empty()) {
        return stats;
    }
    std::sort(samples.begin(), samples.end());
    const std::size_t middle = samples.size() / 2;
    stats.median = samples.size() % 2 == 1 ? samples[middle] : 0.5 * (samples[middle - 1] + samples[middle]);
    stats.min = samples.front();
    stats.max = samples.back();
    return stats;
}

const char* to_string(Status status)
{
    switch (status) {
    case Status::Ok: return "ok";
    case Status::Failed: return "failed";
    case Status::Unsupported: return "unsupported";
    }
    return "?";
}

std::string Check::summary() const
{
    return fmt::format("{}: max_abs {:.3e} (bound {:.3e} = max(max_out {:.3g} x {:.0e}, 1e-3)), max_rel {:.3e}{}, "
                       "{} sampled values, {} non-finite outputs",
                       passed ? "ok" : "MISMATCH", max_abs, bound, max_out, relative, max_rel,
                       max_rel_limited ? " (limit 5e-2)" : "", values, non_finite);
}

double Row::gbps() const { return us() > 0.0 ? static_cast<double>(bytes) / (us() * 1e3) : nan(); }

double Row::tflops() const { return us() > 0.0 ? flops / (us() * 1e6) : nan(); }

std::optional<double> Row::ratio_to_dense() const
{
    const std::optional<double> dense_median = dense_us(*this);
    if (!dense_median || us() <= 0.0) {
        return std::nullopt;
    }
    return *dense_median / us();
}

std::optional<double> Row::percent_of_read_floor() const
{
    if (!read_floor || read_floor->us.median <= 0.0 || us() <= 0.0) {
        return std::nullopt;
    }
    return 100.0 * read_floor->us.median / us();
}

int Report::failed() const
{
    int count = 0;
    for (const Row& row : rows) {
        count += row.status == Status::Failed ? 1 : 0;
    }
    for (const OverheadRow& row : overhead) {
        count += row.status == Status::Failed ? 1 : 0;
    }
    return count;
}

std::string render_report(OutputFormat format, const Report& report)
{
    const bool overhead = report.mode == Mode::HostOverhead;
    switch (format) {
    case OutputFormat::Table: return overhead ? render_overhead_table(report) : render_rows_table(report);
    case OutputFormat::Json: return render_json(report);
    case OutputFormat::Csv: return overhead ? render_overhead_csv(report) : render_rows_csv(report);
    }
    return "";
}

Report parse_report(const std::string& text)
{
    const JsonValue root = tools::parse_json(text);
    if (member(root, "tool").string() != "nbits-bench") {
        throw std::runtime_error("not an nbits-bench --json report (no \"tool\": \"nbits-bench\")");
    }
    Report report;
    report.mode = member(root, "mode").string() == "host-overhead" ? Mode::HostOverhead : Mode::Timing;
    report.version = member(root, "version").string();
    const JsonValue& d = member(root, "device");
    report.device.name = member(d, "name").string();
    report.device.compute_major = static_cast<int>(member(d, "compute_major").number());
    report.device.compute_minor = static_cast<int>(member(d, "compute_minor").number());
    report.device.multiprocessors = static_cast<int>(member(d, "multiprocessors").number());
    report.device.clusters = member(d, "clusters_a_cta_an_sm").string();
    report.device.l2_bytes = member(d, "l2_bytes").unsigned_integer();
    report.device.total_memory = member(d, "total_memory").unsigned_integer();
    report.device.memory_bandwidth_gb_per_s =  // 0 in a report from before the field
        static_cast<std::uint32_t>(member(d, "memory_bandwidth_gb_per_s").unsigned_integer());
    report.device.driver_version = static_cast<int>(member(d, "driver_version").number());
    report.device.nvrtc_version = member(d, "nvrtc_version").string();
    const JsonValue& ceiling = member(root, "read_ceiling");
    if (ceiling.type == JsonValue::Type::Object) {
        ReadCeiling c;
        c.gbps = member(ceiling, "gbps").number(nan());
        c.bytes = member(ceiling, "bytes").unsigned_integer();
        c.timing = read_timing(member(ceiling, "timing")).value_or(Timing{});
        report.ceiling = c;
    }
    const JsonValue& p = member(root, "path");
    report.path.activation = parse_float_dtype(member(p, "activation").string("f16"));
    report.path.scales = parse_float_dtype(member(p, "scales").string("f16"));
    report.path.bits = static_cast<int>(member(p, "bits").number(4));
    report.path.block_size = static_cast<int>(member(p, "block_size").number(32));
    report.path.zero_points = member(p, "zero_points").flag();
    report.path.accuracy_level = static_cast<int>(member(p, "accuracy_level").number());
    const std::string bias = member(p, "bias").string("none");
    report.path.bias = bias == "plain" ? BiasMode::Plain : bias == "folded" ? BiasMode::Folded : BiasMode::None;
    report.path.rmsnorm_prologue = member(p, "rmsnorm_prologue").flag();
    report.path.rmsnorm_epsilon = static_cast<float>(member(p, "rmsnorm_epsilon").number(1e-5));
    for (const JsonValue& policy : member(root, "policies").items) {
        report.policies.push_back(read_policy(policy));
    }
    for (const JsonValue& set : member(root, "override_sets").items) {
        OverrideSet read;
        read.label = member(set, "label").string();
        for (const auto& [name, value] : member(set, "variables").members) {
            read.variables[name] = value.string();
        }
        report.override_sets.push_back(std::move(read));
    }
    report.method = member(root, "method").string();
    report.seed = member(root, "seed").unsigned_integer();
    report.wall_seconds = member(root, "wall_seconds").number();
    for (const JsonValue& row : member(root, "results").items) {
        report.rows.push_back(read_row(row));
    }
    for (const JsonValue& row : member(root, "host_overhead").items) {
        report.overhead.push_back(read_overhead_row(row));
    }
    return report;
}

// -------------------------------------------------------------------- SVG ---

namespace {

std::string xml(const std::string& text)
{
    std::string out;
    for (const char c : text) {
        switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&quot;"; break;
        default: out += c;
        }
    }
    return out;
}

// A policy's colour; a row under an --overrides set takes its set's, after the policies'.
const char* configuration_colour(const Report& report, const Configuration& configuration)
{
    if (configuration.overrides.empty()) {
        return configuration.policy == KernelPolicy::Original ? "#8c8c8c" : "#1f77b4";
    }
    constexpr const char* kSetColours[] = {"#9467bd", "#17becf", "#e377c2", "#bcbd22", "#8c564b", "#7f7f7f"};
    std::size_t index = 0;
    while (index < report.override_sets.size() && report.override_sets[index].label != configuration.overrides) {
        ++index;
    }
    return kSetColours[index % std::size(kSetColours)];
}
constexpr const char* kDenseColour = "#ff7f0e";
constexpr const char* kCeilingColour = "#d62728";
constexpr const char* kReadFloorColour = "#2ca02c";

// One bar of a group: a policy's row or the shape's dense baseline.
struct Bar {
    std::string name;    // "original", "fastest", "fastest+sk", "dense f16"
    const char* colour;
    double value = 0.0;  // GB/s or TFLOP/s; not finite: no bar
    std::string label;   // printed after the bar
};

struct Group {
    std::string title;   // "Llama-3-8B qkv M=1"
    std::vector<Bar> bars;
};

// "N GB/s (P%)", P the share of the read ceiling when the report has one.
std::string bandwidth_label(const Report& report, double gbps)
{
    const double percent = percent_of_read(report, gbps);
    return std::isfinite(percent) ? fmt::format("{:.0f} GB/s ({:.0f}%)", gbps, percent)
                                  : fmt::format("{:.0f} GB/s", gbps);
}

// The rows of one regime grouped by shape and M, in report order.
std::vector<Group> groups_of(const Report& report, Regime regime)
{
    std::vector<Group> groups;
    std::vector<const Row*> firsts;
    for (const Row& row : report.rows) {
        if (row.shape.regime != regime) {
            continue;
        }
        auto found = std::find_if(firsts.begin(), firsts.end(), [&](const Row* first) {
            return first->shape.same_node(row.shape) && first->shape.m == row.shape.m;
        });
        if (found == firsts.end()) {
            firsts.push_back(&row);
            groups.push_back({fmt::format("{} M={}", row.shape.label(), row.shape.m), {}});
            found = firsts.end() - 1;
        }
        Group& group = groups[static_cast<std::size_t>(found - firsts.begin())];
        Bar bar{row.configuration().name(), configuration_colour(report, row.configuration()), nan(), ""};
        if (row.status != Status::Ok) {
            bar.label = to_string(row.status);
        } else if (regime == Regime::Decode) {
            bar.value = row.gbps();
            bar.label = bandwidth_label(report, bar.value);
        } else {
            bar.value = row.tflops();
            bar.label = fmt::format("{:.1f} TFLOP/s", bar.value);
        }
        if (const std::optional<double> ratio = row.ratio_to_dense()) {
            bar.label += fmt::format(", {:.2f}x dense", *ratio);
        }
        group.bars.push_back(bar);
    }
    // Dense last in each group, once.
    for (std::size_t g = 0; g < groups.size(); ++g) {
        const Row& first = *firsts[g];
        if (!first.dense) {
            continue;
        }
        Bar bar{fmt::format("dense {}", short_name(first.dense->dtype)), kDenseColour, nan(), ""};
        if (!first.dense->timing) {
            bar.label = "dense failed";
        } else if (regime == Regime::Decode) {
            bar.value = dense_gbps(*first.dense);
            bar.label = bandwidth_label(report, bar.value);
        } else {
            bar.value = dense_tflops(first);
            bar.label = fmt::format("{:.1f} TFLOP/s", bar.value);
        }
        groups[g].bars.push_back(bar);
    }
    // The read floor (--read-floor) last: the same bytes read by a plain streaming kernel.
    for (std::size_t g = 0; g < groups.size(); ++g) {
        const Row& first = *firsts[g];
        if (regime != Regime::Decode || !first.read_floor || !(first.read_floor->us.median > 0.0)) {
            continue;
        }
        const double gbps = static_cast<double>(first.bytes) / (first.read_floor->us.median * 1e3);
        groups[g].bars.push_back({"read floor", kReadFloorColour, gbps, bandwidth_label(report, gbps)});
    }
    return groups;
}

constexpr double kWidth = 1100.0;
constexpr double kLabelWidth = 250.0;
constexpr double kPlotLeft = kLabelWidth + 10.0;
constexpr double kPlotWidth = 620.0;
constexpr double kBarHeight = 11.0;
constexpr double kBarGap = 2.0;
constexpr double kGroupGap = 12.0;

// Draws one panel from `top`; returns the y below it.
double draw_panel(std::string& svg, double top, const std::string& title, const std::vector<Group>& groups,
                  bool logarithmic, const std::optional<double>& ceiling, const char* unit)
{
    double low = std::numeric_limits<double>::infinity();
    double high = ceiling.value_or(0.0);
    for (const Group& group : groups) {
        for (const Bar& bar : group.bars) {
            if (std::isfinite(bar.value) && bar.value > 0.0) {
                low = std::min(low, bar.value);
                high = std::max(high, bar.value);
            }
        }
    }
    if (!(high > 0.0)) {
        high = 1.0;
    }
    double axis_low = 0.0;
    double axis_high = high * 1.08;
    if (logarithmic) {
        axis_low = std::pow(10.0, std::floor(std::log10(std::isfinite(low) ? low : high / 10.0)));
        axis_high = std::pow(10.0, std::ceil(std::log10(high * 1.01)));
        if (axis_high <= axis_low) {
            axis_high = axis_low * 10.0;
        }
    }
    const auto x_of = [&](double value) {
        const double fraction = logarithmic
                                    ? (std::log10(std::max(value, axis_low)) - std::log10(axis_low)) /
                                          (std::log10(axis_high) - std::log10(axis_low))
                                    : value / axis_high;
        return kPlotLeft + kPlotWidth * std::clamp(fraction, 0.0, 1.0);
    };

    svg += fmt::format(R"(<text x="10" y="{:.1f}" font-size="15" font-weight="bold">{}</text>)" "\n", top + 16,
                       xml(title));
    const double plot_top = top + 44.0;
    double plot_height = 0.0;
    for (const Group& group : groups) {
        plot_height += static_cast<double>(group.bars.size()) * (kBarHeight + kBarGap) + kGroupGap;
    }
    const double plot_bottom = plot_top + plot_height;

    // Grid and axis labels, above and below the bars.
    std::vector<double> ticks;
    if (logarithmic) {
        for (double t = axis_low; t <= axis_high * 1.001; t *= 10.0) {
            ticks.push_back(t);
        }
    } else {
        const double raw = axis_high / 5.0;
        const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
        const double step = raw / magnitude < 2.0 ? 2.0 * magnitude : raw / magnitude < 5.0 ? 5.0 * magnitude
                                                                                             : 10.0 * magnitude;
        for (double t = 0.0; t <= axis_high; t += step) {
            ticks.push_back(t);
        }
    }
    for (const double t : ticks) {
        const double x = x_of(t);
        svg += fmt::format(R"(<line x1="{0:.1f}" y1="{1:.1f}" x2="{0:.1f}" y2="{2:.1f}" stroke="#e0e0e0"/>)" "\n", x,
                           plot_top - 4, plot_bottom);
        for (const double y : {plot_top - 8, plot_bottom + 14}) {
            svg += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" font-size="10" text-anchor="middle" fill="#555">{:g}</text>)"
                               "\n",
                               x, y, t);
        }
    }
    svg += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" font-size="11" text-anchor="middle" fill="#555">{}{}</text>)"
                       "\n",
                       kPlotLeft + kPlotWidth / 2, plot_bottom + 30, unit, logarithmic ? " (log scale)" : "");

    double y = plot_top;
    for (const Group& group : groups) {
        const double group_height = static_cast<double>(group.bars.size()) * (kBarHeight + kBarGap);
        svg += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" font-size="11" text-anchor="end">{}</text>)" "\n",
                           kLabelWidth, y + group_height / 2 + 4, xml(group.title));
        for (const Bar& bar : group.bars) {
            const bool drawn = std::isfinite(bar.value) && bar.value > 0.0;
            const double end = drawn ? x_of(bar.value) : kPlotLeft;
            if (drawn) {
                svg += fmt::format(R"(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="{}">)"
                                   R"(<title>{}: {}</title></rect>)" "\n",
                                   kPlotLeft, y, std::max(end - kPlotLeft, 0.5), kBarHeight, bar.colour,
                                   xml(bar.name), xml(bar.label));
            }
            svg += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" font-size="9" fill="#333">{}: {}</text>)" "\n", end + 4,
                               y + kBarHeight - 2, xml(bar.name), xml(bar.label));
            y += kBarHeight + kBarGap;
        }
        y += kGroupGap;
    }
    if (ceiling) {
        const double x = x_of(*ceiling);
        svg += fmt::format(R"(<line x1="{0:.1f}" y1="{1:.1f}" x2="{0:.1f}" y2="{2:.1f}" stroke="{3}" )"
                           R"(stroke-width="1.5" stroke-dasharray="6,4"/>)" "\n",
                           x, plot_top - 4, plot_bottom, kCeilingColour);
        svg += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" font-size="11" fill="{}" text-anchor="middle">)"
                           R"(read ceiling {:.0f} GB/s</text>)" "\n",
                           x, plot_top - 22, kCeilingColour, *ceiling);
    }
    return plot_bottom + 44.0;
}

}  // namespace

std::string render_svg(const Report& report)
{
    const std::vector<Group> decode = groups_of(report, Regime::Decode);
    const std::vector<Group> prefill = groups_of(report, Regime::Prefill);
    std::string body;
    double y = 70.0;
    if (!decode.empty()) {
        std::optional<double> ceiling;
        if (report.ceiling && report.ceiling->gbps > 0.0) {
            ceiling = report.ceiling->gbps;
        }
        y = draw_panel(body, y, "Decode: achieved bandwidth per row (bytes a perfect kernel moves / median time)",
                       decode, false, ceiling, "GB/s");
    }
    if (!prefill.empty()) {
        y = draw_panel(body, y, "Prefill: throughput per row (2·M·K·N / median time)", prefill, true, std::nullopt,
                       "TFLOP/s");
    }
    if (decode.empty() && prefill.empty()) {
        body += R"(<text x="10" y="90" font-size="13">no timed rows to draw</text>)" "\n";
        y = 120.0;
    }

    std::string legend;
    double x = 10.0;
    std::vector<std::pair<std::string, const char*>> keys;
    for (const KernelPolicy policy : report.policies) {
        keys.emplace_back(to_string(policy), configuration_colour(report, {policy, ""}));
        for (const OverrideSet& set : report.override_sets) {
            const Configuration configuration{policy, set.label};
            keys.emplace_back(configuration.name(), configuration_colour(report, configuration));
        }
    }
    keys.emplace_back(fmt::format("dense {} (cuBLASLt)", short_name(report.path.activation)), kDenseColour);
    if (std::any_of(report.rows.begin(), report.rows.end(), [](const Row& r) { return r.read_floor.has_value(); })) {
        keys.emplace_back("read floor (a streaming read of the row's bytes)", kReadFloorColour);
    }
    for (const auto& [name, colour] : keys) {
        legend += fmt::format(R"(<rect x="{:.1f}" y="46" width="12" height="12" fill="{}"/>)"
                              R"(<text x="{:.1f}" y="56" font-size="12">{}</text>)" "\n",
                              x, colour, x + 16, xml(name));
        x += 30.0 + 7.0 * static_cast<double>(name.size());
    }
    const std::string header = fmt::format(
        R"(<svg xmlns="http://www.w3.org/2000/svg" width="{:.0f}" height="{:.0f}" viewBox="0 0 {:.0f} {:.0f}" )"
        R"(font-family="sans-serif">)" "\n"
        R"(<rect width="100%" height="100%" fill="white"/>)" "\n"
        R"(<text x="10" y="20" font-size="16" font-weight="bold">nbits-bench on {}: policies beside cuBLASLt dense</text>)"
        "\n"
        R"(<text x="10" y="38" font-size="12" fill="#444">{} (seed {})</text>)" "\n",
        kWidth, y, kWidth, y, xml(report.device.name), xml(report.path.describe()), report.seed);
    return header + legend + body + "</svg>\n";
}

}  // namespace nbits::bench

#include "startup_report.hpp"
#include "runtime/internals.hpp"

#include "decode_step.hpp"
#include "json_writer.hpp"
#include "text_table.hpp"

#include "jit/compile.hpp"

#include <fmt/format.h>

namespace nbits::startup {
namespace {

const char* verdict(bool met) { return met ? "MET" : "MISSED"; }

void samples_field(JsonWriter& json, std::string_view name, const Samples& samples)
{
    json.key(name).begin_object();
    json.field("median", samples.median()).field("min", samples.min()).field("max", samples.max());
    json.key("values").begin_array();
    for (double value : samples.values) {
        json.value(value);
    }
    json.end_array().end_object();
}

void entries_field(JsonWriter& json)
{
    json.key("decode_step_entries").begin_array();
    for (std::string_view entry : kDecodeStepEntries) {
        json.value(entry);
    }
    json.end_array();
}

}  // namespace

std::string gpu_table(const GpuMeasurement& m)
{
    std::string text = fmt::format(
        "nbits-startup on {} ({}), NVRTC {}: a fresh process until the decode step's functions are launchable\n"
        "(scales_f16 for qkv/o, gate_up_swiglu, down_c2); median of {} processes per mode, driver JIT cache off.\n"
        "\"first\" and \"all 3\" count from the constructed CudaRuntime; \"process\" counts from the parent's\n"
        "spawn call and includes exec, loading and the driver's cuInit + context creation (\"runtime\").\n\n",
        m.gpu_name, m.cubin_target, jit::nvrtc_version(), m.repeats);
    tools::TextTable table;
    table.column("mode", tools::TextTable::Align::Left);
    for (const char* header : {"first ms", "all 3 ms", "process->1 ms", "process->3 ms", "runtime ms", "compiles"}) {
        table.column(header);
    }
    std::string failures;
    for (const ModeResult& mode : m.modes) {
        if (!mode.failure.empty()) {
            table.row({mode.description, "FAILED"});
            failures += fmt::format("\n{} FAILED:\n{}\n", mode.description, mode.failure);
            continue;
        }
        auto ms = [](const Samples& samples) { return fmt::format("{:.2f}", samples.median()); };
        table.row({mode.description, ms(mode.first_ms), ms(mode.all_ms), ms(mode.process_to_first_ms),
                   ms(mode.process_to_all_ms), ms(mode.runtime_init_ms), fmt::format("{:.0f}", mode.compiles.median())});
    }
    text += table.render() + failures;
    text += fmt::format("\nin-process hit: {:.1f} ns per runtime.internals().function() ({} lookups, round-robin over the step); "
                        "{:.1f} ns with the context already current (an engine thread)\n",
                        m.hit_ns.median(), m.hits, m.hit_current_ns.median());
    if (m.failed()) {
        return text;
    }
    const ModeResult& warm = m.mode("warm_cubin");
    const ModeResult& cold_entry = m.mode("cold_entry");
    const ModeResult& cold_source = m.mode("cold_source");
    text += fmt::format(
        "\ntargets:\n"
        "  warm disk cache, all entries of a decode step <= {:.0f} ms: {:.2f} ms {}\n"
        "    (from process start {:.2f} ms: {:.2f} ms exec and library loading, {:.2f} ms CudaRuntime creation\n"
        "    (cuInit, primary context, stream), then the {:.2f} ms above)\n"
        "  in-process hit <= {:.0f} ns: {:.1f} ns {} ({:.1f} ns with the context current)\n"
        "granularity, cold, first entry: per-entry {:.1f} ms vs whole {} source {:.1f} ms\n",
        kWarmStepTargetMs, warm.all_ms.median(), verdict(warm.all_ms.median() <= kWarmStepTargetMs),
        warm.process_to_all_ms.median(), warm.spawn_to_main_ms.median(), warm.runtime_init_ms.median(),
        warm.all_ms.median(), kHitTargetNs, m.hit_ns.median(),
        verdict(m.hit_ns.median() <= kHitTargetNs), m.hit_current_ns.median(), cold_entry.first_ms.median(), "gemv_f16",
        cold_source.first_ms.median());
    if (warm.compiles.max() > 0 || m.mode("warm_ptx").compiles.max() > 0) {
        text += "warning: a warm run compiled: the disk cache missed (see the compiles column)\n";
    }
    return text;
}

std::string gpu_json(const GpuMeasurement& m)
{
    JsonWriter json;
    json.begin_object()
        .field("tool", "nbits-startup")
        .field("measurement", "gpu")
        .field("gpu", m.gpu_name)
        .field("target", m.cubin_target)
        .field("nvrtc", jit::nvrtc_version())
        .field("repeats", m.repeats)
        .field("prewarm_seconds", m.prewarm_seconds);
    entries_field(json);
    json.key("modes").begin_array();
    for (const ModeResult& mode : m.modes) {
        json.begin_object().field("mode", mode.key).field("description", mode.description);
        if (!mode.failure.empty()) {
            json.field("failure", mode.failure);
        }
        samples_field(json, "first_ms", mode.first_ms);
        samples_field(json, "all_ms", mode.all_ms);
        samples_field(json, "process_to_first_ms", mode.process_to_first_ms);
        samples_field(json, "process_to_all_ms", mode.process_to_all_ms);
        samples_field(json, "runtime_init_ms", mode.runtime_init_ms);
        samples_field(json, "spawn_to_main_ms", mode.spawn_to_main_ms);
        samples_field(json, "compiles", mode.compiles);
        json.end_object();
    }
    json.end_array();
    samples_field(json, "hit_ns", m.hit_ns);
    samples_field(json, "hit_current_ns", m.hit_current_ns);
    json.field("hits", m.hits);
    if (!m.failed()) {
        json.key("targets")
            .begin_object()
            .field("warm_all_ms_limit", kWarmStepTargetMs)
            .field("warm_all_ms", m.mode("warm_cubin").all_ms.median())
            .field("warm_met", m.mode("warm_cubin").all_ms.median() <= kWarmStepTargetMs)
            .field("hit_ns_limit", kHitTargetNs)
            .field("hit_ns", m.hit_ns.median())
            .field("hit_met", m.hit_ns.median() <= kHitTargetNs)
            .end_object();
    }
    json.end_object();
    return json.str();
}

std::string compile_table(const CompileMeasurement& m)
{
    std::string text = fmt::format(
        "nbits-startup --compile-only: NVRTC {} compile time of the decode step, no GPU; median of {}, wall clock\n"
        "and [CPU time]: the CPU time is what an idle machine takes. {} hardware threads, load average {};\n"
        "NVRTC's first use in a process adds {:.2f} s (not included)\n\n",
        jit::nvrtc_version(), m.repeats, m.hardware_threads, m.load_average, m.nvrtc_first_use_s);
    tools::TextTable table;
    table.column("target", tools::TextTable::Align::Left);
    for (const std::string& header : {std::string("first entry alone"), "whole " + m.first_source_name,
                                      std::string("3 step entries"), std::string("2 step sources")}) {
        table.column(header);
    }
    auto cell = [](const CompileSeconds& s) {
        return fmt::format("{:.3f} s [{:.3f}]", s.wall.median(), s.cpu.median());
    };
    for (const TargetCompileTimes& t : m.targets) {
        table.row({t.target.str(), cell(t.first_entry), cell(t.first_source), cell(t.step_entries),
                   cell(t.step_sources)});
    }
    text += table.render();
    for (const TargetCompileTimes& t : m.targets) {
        text += fmt::format("{}: first entry image {:.0f} bytes, whole {} image {:.0f} bytes; per-entry reaches the "
                            "first function {:.1f}x sooner (CPU time)\n",
                            t.target.str(), t.first_entry_bytes.median(), m.first_source_name,
                            t.first_source_bytes.median(), t.first_source.cpu.median() / t.first_entry.cpu.median());
    }
    return text;
}

std::string compile_json(const CompileMeasurement& m)
{
    JsonWriter json;
    json.begin_object()
        .field("tool", "nbits-startup")
        .field("measurement", "compile-only")
        .field("nvrtc", jit::nvrtc_version())
        .field("repeats", m.repeats)
        .field("hardware_threads", static_cast<std::uint64_t>(m.hardware_threads))
        .field("load_average", m.load_average)
        .field("nvrtc_first_use_seconds", m.nvrtc_first_use_s)
        .field("first_source", m.first_source_name);
    entries_field(json);
    json.key("targets").begin_array();
    for (const TargetCompileTimes& t : m.targets) {
        json.begin_object().field("target", t.target.str());
        const std::pair<const char*, const CompileSeconds*> timings[] = {{"first_entry", &t.first_entry},
                                                                          {"first_source", &t.first_source},
                                                                          {"step_entries", &t.step_entries},
                                                                          {"step_sources", &t.step_sources}};
        for (const auto& [name, seconds] : timings) {
            samples_field(json, std::string(name) + "_wall_seconds", seconds->wall);
            samples_field(json, std::string(name) + "_cpu_seconds", seconds->cpu);
        }
        samples_field(json, "first_entry_bytes", t.first_entry_bytes);
        samples_field(json, "first_source_bytes", t.first_source_bytes);
        json.end_object();
    }
    json.end_array().end_object();
    return json.str();
}

}  // namespace nbits::startup

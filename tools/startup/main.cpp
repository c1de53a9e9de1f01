// nbits-startup: how long a fresh process takes to get the decode step's
// launchable functions, cold and with the disk cache, and what a lookup
// costs once they are loaded. This file: the command line, the reports and
// main.

#include "startup.hpp"

#include "command_line.hpp"
#include "jit/cache_text.hpp"
#include "jit/compile.hpp"
#include "json_writer.hpp"
#include "nbits/error.hpp"
#include "text_table.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <fstream>

namespace nbits::startup {
namespace {

// ---- the command line ------------------------------------------------------

tools::CommandLine command_line(StartupOptions& options)
{
    tools::CommandLine cli(
        "nbits-startup [--repeat N] [--hits N] [--device N] [--work-dir DIR] [--json] [--json-out FILE]\n"
        "       nbits-startup --compile-only [--repeat N]",
        "Measures how long a fresh process takes to get the launchable functions of one transformer decode\n"
        "step (matmul_nbits_gemv_f16_scales_f16, _gate_up_swiglu, _scales_f16_down_c2): with an empty disk\n"
        "cache (per-entry and whole-source compiles, one after the other, and per entry through\n"
        "CudaRuntime::prepare, in parallel; each compiling to PTX, as by default, and per entry to CUBIN,\n"
        "RuntimeOptions::jit_image), with a prewarmed cache, and with the PTX a cold run left; and\n"
        "the in-process lookup once loaded. Each mode runs in fresh child processes, with the\n"
        "driver's own JIT cache off (CUDA_CACHE_DISABLE=1). Needs a GPU, except --compile-only, which times\n"
        "the NVRTC part of a cold start (per entry vs whole source) on any machine.\n"
        "Exit codes: 0 measured, 1 a measurement failed, 2 usage error, 3 no GPU.");
    cli.option("repeat", "N", "fresh processes (or compiles) per mode; the median is reported. Default 5",
               [&](const std::string& value) { options.repeats = static_cast<int>(tools::parse_integer(value, 1, 1000)); });
    cli.option("hits", "N", "runtime.internals().function() lookups timed in process. Default 1000000",
               [&](const std::string& value) { options.hits = tools::parse_integer(value, 1, 1'000'000'000); });
    cli.option("device", "N", "the GPU ordinal. Default 0",
               [&](const std::string& value) { options.device = static_cast<int>(tools::parse_integer(value, 0, 1024)); });
    cli.option("work-dir", "DIR", "where the scratch cache directories go (removed afterwards). Default $TMPDIR or /tmp",
               [&](const std::string& value) { options.work_dir = value; });
    cli.flag("compile-only", "time NVRTC alone (no GPU needed): one entry vs its whole source", &options.compile_only);
    cli.flag("json", "print JSON instead of the table", &options.json);
    cli.option("json-out", "FILE", "also write the JSON to FILE", [&](const std::string& value) { options.json_out = value; });
    cli.flag("help", "this text", &options.help);
    cli.section("Internal: the measured child process (nbits-startup spawns itself)");
    cli.flag("child", "run as the measured child", &options.child);
    cli.option("cache-dir", "DIR", "the child's disk cache", [&](const std::string& value) {
        options.child_options.cache_dir = value;
    });
    cli.option("granularity", "entry|source", "the child's compile granularity", [&](const std::string& value) {
        const std::optional<CompileGranularity> granularity = parse_granularity(value);
        if (!granularity) {
            throw tools::UsageError("expected entry or source");
        }
        options.child_options.granularity = *granularity;
    });
    cli.option("spawned-at-ns", "NS", "the parent's CLOCK_MONOTONIC at spawn", [&](const std::string& value) {
        options.child_options.spawned_at_ns = tools::parse_integer(value, 0);
    });
    cli.option("child-hits", "N", "lookups the child times after loading", [&](const std::string& value) {
        options.child_options.hits = tools::parse_integer(value, 0);
    });
    cli.flag("prepare", "the child loads the step's entries through CudaRuntime::prepare, in parallel",
             &options.child_options.prepare);
    cli.option("jit-image", "ptx|cubin", "what the child's cold compiles make", [&](const std::string& value) {
        const std::optional<JitImage> image = parse_jit_image(value);
        if (!image) {
            throw tools::UsageError("expected ptx or cubin");
        }
        options.child_options.jit_image = *image;
    });
    return cli;
}

// Throws tools::UsageError.
StartupOptions parse_options(int argc, char** argv)
{
    StartupOptions options;
    command_line(options).parse(argc, argv);
    if (options.child && options.child_options.cache_dir.empty()) {
        throw tools::UsageError("--child needs --cache-dir");
    }
    return options;
}

std::string help_text()
{
    StartupOptions options;
    return command_line(options).help();
}

// ---- reports ---------------------------------------------------------------

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

std::string gpu_table(const GpuMeasurement& m)
{
    std::string text = fmt::format(
        "nbits-startup on {} ({}), NVRTC {}: a fresh process until the decode step's functions are launchable\n"
        "(scales_f16 for qkv/o, gate_up_swiglu, down_c2); median of {} processes per mode, driver JIT cache off.\n"
        "\"first\" and \"all 3\" count from the constructed CudaRuntime; \"process\" counts from the parent's\n"
        "spawn call and includes exec, loading and the driver's cuInit + context creation (\"runtime\").\n\n",
        jit::printable(m.gpu_name), m.cubin_target, jit::nvrtc_version(), m.repeats);
    tools::TextTable table;
    table.column("mode", tools::TextTable::Align::Left);
    for (const char* header : {"first ms", "all 3 ms", "process->1 ms", "process->3 ms", "runtime ms", "compiles"}) {
        table.column(header);
    }
    std::string failures;
    for (const ModeResult& mode : m.modes) {
        if (!mode.failure.empty()) {
            table.row({mode.description, "FAILED"});
            failures += fmt::format("\n{} FAILED:\n{}\n", mode.description, jit::printable(mode.failure, true));
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
        "  empty cache, all entries of a decode step <= {:.0f} ms: {:.2f} ms one after the other {}, {:.2f} ms\n"
        "    through CudaRuntime::prepare {}; compiling to CUBIN {:.2f} ms one after the other {}, {:.2f} ms\n"
        "    through CudaRuntime::prepare {}\n"
        "granularity, cold, first entry: per-entry {:.1f} ms vs whole {} source {:.1f} ms\n",
        kWarmStepTargetMs, warm.all_ms.median(), verdict(warm.all_ms.median() <= kWarmStepTargetMs),
        warm.process_to_all_ms.median(), warm.spawn_to_main_ms.median(), warm.runtime_init_ms.median(),
        warm.all_ms.median(), kHitTargetNs, m.hit_ns.median(),
        verdict(m.hit_ns.median() <= kHitTargetNs), m.hit_current_ns.median(), kColdStepTargetMs,
        cold_entry.all_ms.median(), verdict(cold_entry.all_ms.median() <= kColdStepTargetMs),
        m.mode("cold_prepared").all_ms.median(), verdict(m.mode("cold_prepared").all_ms.median() <= kColdStepTargetMs),
        m.mode("cold_entry_cubin").all_ms.median(),
        verdict(m.mode("cold_entry_cubin").all_ms.median() <= kColdStepTargetMs),
        m.mode("cold_prepared_cubin").all_ms.median(),
        verdict(m.mode("cold_prepared_cubin").all_ms.median() <= kColdStepTargetMs),
        cold_entry.first_ms.median(), "gemv_f16",
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
            .field("cold_all_ms_limit", kColdStepTargetMs)
            .field("cold_all_ms", m.mode("cold_entry").all_ms.median())
            .field("cold_prepared_all_ms", m.mode("cold_prepared").all_ms.median())
            .field("cold_prepared_met", m.mode("cold_prepared").all_ms.median() <= kColdStepTargetMs)
            .field("cold_cubin_all_ms", m.mode("cold_entry_cubin").all_ms.median())
            .field("cold_prepared_cubin_all_ms", m.mode("cold_prepared_cubin").all_ms.median())
            .field("cold_prepared_cubin_met", m.mode("cold_prepared_cubin").all_ms.median() <= kColdStepTargetMs)
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

}  // namespace
}  // namespace nbits::startup

using namespace nbits;
using namespace nbits::startup;

namespace {

int report(const StartupOptions& options, const std::string& table, const std::string& json, int exit_code)
{
    std::fputs((options.json ? json : table).c_str(), stdout);
    if (!options.json_out.empty() && !(std::ofstream(options.json_out) << json)) {
        std::fprintf(stderr, "nbits-startup: cannot write %s. How to fix: name a writable file in --json-out\n",
                     jit::printable(options.json_out).c_str());
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
        std::fprintf(stderr, "nbits-startup: %s\n", jit::printable(error.what(), true).c_str());
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
                         jit::printable(error.what(), true).c_str());
            return kExitNoGpu;
        }
        std::fprintf(stderr, "nbits-startup: %s\n", jit::printable(error.what(), true).c_str());
        return kExitFailed;
    } catch (const std::exception& error) {
        std::fprintf(stderr, "nbits-startup: %s\n", jit::printable(error.what(), true).c_str());
        return kExitFailed;
    }
}

#pragma once

// nbits-startup: what one invocation was asked to do, what it measures, and
// the process plumbing of its measured children.

#include "jit/target.hpp"
#include "runtime/module_cache.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <ctime>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace nbits::startup {

// Exit codes of nbits-startup.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;  // a measured child process failed
inline constexpr int kExitUsage = 2;
inline constexpr int kExitNoGpu = 3;

// The targets for a decode step.
inline constexpr double kWarmStepTargetMs = 20.0;  // prewarmed cache: every function of the step
inline constexpr double kHitTargetNs = 1000.0;     // in-process lookup, amortized
inline constexpr double kColdStepTargetMs = 100.0;  // empty cache: every function of the step, after the runtime

// The entries one decode step of a transformer layer launches (fp16
// activations, int4 block-32, fp16 scales, symmetric), first-launched first.
inline constexpr std::array<std::string_view, 3> kDecodeStepEntries = {
    "matmul_nbits_gemv_f16_scales_f16",          // qkv and o projections
    "matmul_nbits_gemv_f16_gate_up_swiglu",      // gate + up, fused SwiGLU
    "matmul_nbits_gemv_f16_scales_f16_down_c2",  // down projection
};

// CLOCK_MONOTONIC is one clock for every process of the machine, so a time
// the parent reads before spawning compares with one the child reads.
inline std::int64_t monotonic_ns()
{
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    return static_cast<std::int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

// ---- options ---------------------------------------------------------------

// The measured child process: what the parent passes it.
struct ChildOptions {
    std::string cache_dir;
    CompileGranularity granularity = CompileGranularity::Entry;
    std::int64_t spawned_at_ns = 0;  // the parent's CLOCK_MONOTONIC just before it spawned this process
    std::int64_t hits = 0;           // in-process lookups to time after loading
    bool prepare = false;            // load the step's entries through CudaRuntime::prepare (in parallel)
    JitImage jit_image = JitImage::Ptx;  // what a cold compile makes
};

struct StartupOptions {
    bool help = false;
    bool compile_only = false;
    int repeats = 5;
    std::int64_t hits = 1'000'000;
    int device = 0;
    std::string work_dir;  // empty: $TMPDIR, else /tmp
    bool json = false;
    std::string json_out;

    bool child = false;
    ChildOptions child_options;
};

// ---- measurements ----------------------------------------------------------

// Repeated measurements of one quantity.
struct Samples {
    std::vector<double> values;

    void add(double value) { values.push_back(value); }
    bool empty() const { return values.empty(); }
    double median() const
    {
        if (values.empty()) {
            return 0.0;
        }
        std::vector<double> sorted = values;
        std::sort(sorted.begin(), sorted.end());
        const std::size_t middle = sorted.size() / 2;
        return sorted.size() % 2 == 1 ? sorted[middle] : 0.5 * (sorted[middle - 1] + sorted[middle]);
    }
    double min() const { return values.empty() ? 0.0 : *std::min_element(values.begin(), values.end()); }
    double max() const { return values.empty() ? 0.0 : *std::max_element(values.begin(), values.end()); }
};

// Seconds on the wall clock and of this process's CPU time: on a shared,
// loaded machine the CPU time is what a quiet machine would take.
struct CompileSeconds {
    Samples wall, cpu;
};

struct TargetCompileTimes {
    jit::Target target;
    // "first": the step's first entry alone vs its whole source (gemv_f16);
    // "step": every entry of the step, one compile each, vs every source of
    // the step, one compile each.
    CompileSeconds first_entry, first_source, step_entries, step_sources;
    Samples first_entry_bytes, first_source_bytes;
};

// The NVRTC part of a cold start, without a GPU: the decode step's entries
// compiled one by one (per-entry granularity) against their whole sources.
struct CompileMeasurement {
    int repeats = 0;
    unsigned hardware_threads = 0;
    std::string load_average;        // /proc/loadavg before measuring: this machine may be shared
    double nvrtc_first_use_s = 0.0;  // a tiny compile, paid once per process
    std::string first_source_name;
    std::vector<TargetCompileTimes> targets;
};

CompileMeasurement measure_compiles(const StartupOptions& options);

struct ModeResult {
    ModeResult(std::string key_name, std::string what) : key(std::move(key_name)), description(std::move(what)) {}

    std::string key;          // "cold_entry", "cold_source", "warm_cubin", "warm_ptx", "cold_prepared", ...
    std::string description;  // for the table
    // Milliseconds; "first"/"all" count from the runtime being constructed,
    // "process_to_*" from the parent's spawn call.
    Samples first_ms, all_ms, process_to_first_ms, process_to_all_ms, runtime_init_ms, spawn_to_main_ms;
    Samples compiles;  // NVRTC runs in the child: 0 for a working warm cache
    std::string failure;
};

// Fresh-process time to the decode step's functions, per cache mode.
struct GpuMeasurement {
    std::string gpu_name;
    std::string cubin_target;  // "sm_90": what the prewarmed mode holds
    int repeats = 0;
    double prewarm_seconds = 0.0;
    std::vector<ModeResult> modes;
    // Amortized runtime.internals().function() lookup per warm child: from a thread
    // without the context current, and from one that has it current.
    Samples hit_ns, hit_current_ns;
    std::int64_t hits = 0;

    bool failed() const;
    const ModeResult& mode(const std::string& key) const;
};

// Throws Error(NoDriver) or Error(NoDevice) without a usable GPU.
GpuMeasurement measure_gpu(const StartupOptions& options);

// ---- the measured child ----------------------------------------------------

// Run in the child: creates a runtime on `device`, gets every decode-step
// function, times `hits` lookups, and prints one line of name=value timings
// (nanoseconds) for the parent.
int run_child(const ChildOptions& options, int device);

// The parent's reading of that line; nothing when the output has none.
using ChildTimings = std::map<std::string, double>;
std::optional<ChildTimings> parse_child_output(const std::string& output);

struct ChildRun {
    int exit_code = -1;  // -1: did not start or did not exit normally
    std::string output;  // stdout and stderr together
};

// Runs this executable again (/proc/self/exe) with `arguments`, plus
// `--spawned-at-ns <CLOCK_MONOTONIC>` read immediately before the spawn, in
// this process's environment changed by `environment` (an empty value
// removes the variable), and waits for it.
ChildRun spawn_self(const std::vector<std::string>& arguments, const std::map<std::string, std::string>& environment);

}  // namespace nbits::startup

#pragma once

// Fresh-process time to the decode step's functions, per cache mode.

#include "options.hpp"
#include "runtime/internals.hpp"
#include "samples.hpp"

#include <string>
#include <vector>

namespace nbits::startup {

struct ModeResult {
    ModeResult(std::string key_name, std::string what) : key(std::move(key_name)), description(std::move(what)) {}

    std::string key;          // "cold_entry", "cold_source", "warm_cubin", "warm_ptx"
    std::string description;  // for the table
    // Milliseconds; "first"/"all" count from the runtime being constructed,
    // "process_to_*" from the parent's spawn call.
    Samples first_ms, all_ms, process_to_first_ms, process_to_all_ms, runtime_init_ms, spawn_to_main_ms;
    Samples compiles;  // NVRTC runs in the child: 0 for a working warm cache
    std::string failure;
};

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

}  // namespace nbits::startup

#pragma once

// The NVRTC part of a cold start, without a GPU: the decode step's entries
// compiled one by one (per-entry granularity) against their whole sources.

#include "options.hpp"
#include "samples.hpp"

#include <string>
#include <vector>

namespace nbits::startup {

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

struct CompileMeasurement {
    int repeats = 0;
    unsigned hardware_threads = 0;
    std::string load_average;   // /proc/loadavg before measuring: this machine may be shared
    double nvrtc_first_use_s = 0.0;  // a tiny compile, paid once per process
    std::string first_source_name;
    std::vector<TargetCompileTimes> targets;
};

// Throws Error(MissingHeaders) when NVRTC lacks cuda_fp16.h.
CompileMeasurement measure_compiles(const StartupOptions& options);

}  // namespace nbits::startup

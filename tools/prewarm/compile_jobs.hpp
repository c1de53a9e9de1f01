#pragma once

// The images one prewarm makes, and the parallel run that makes them.

#include "options.hpp"

#include "jit/disk_cache.hpp"
#include "jit/kernel_source.hpp"

#include <functional>
#include <string>
#include <vector>

namespace nbits::prewarm {

struct CompileJob {
    const jit::KernelSource* source = nullptr;
    std::string entry;  // empty: the whole source
    jit::Target target;

    // "gemv_f16:matmul_nbits_gemv_f16", or "gemv_f16" for a whole source.
    std::string label() const;
};

enum class Outcome { Compiled, Cached, Failed };
const char* to_string(Outcome outcome);

struct JobResult {
    Outcome outcome = Outcome::Failed;
    double seconds = 0.0;
    std::size_t image_bytes = 0;
    std::string error;
};

// Source-major, then entry, then target, in the embedded order.
std::vector<CompileJob> plan_jobs(const PrewarmOptions& options, const std::vector<jit::Target>& targets);

// Runs `jobs` on `threads` threads through the runtime's own compile-or-load
// path, so that each image lands under exactly the key a runtime looks up.
// `on_done` is called (serialised) after each job.
std::vector<JobResult> run_jobs(const std::vector<CompileJob>& jobs, CompileGranularity granularity,
                                const std::vector<std::string>& include_dirs, jit::DiskCache& cache, int threads,
                                const std::function<void(std::size_t index, const JobResult&)>& on_done);

}  // namespace nbits::prewarm

#pragma once

// What a prewarm run did: the entries x targets table and its JSON.

#include "compile_jobs.hpp"

#include <string>
#include <vector>

namespace nbits::prewarm {

struct PrewarmRun {
    std::string cache_dir;
    CompileGranularity granularity = CompileGranularity::Entry;
    std::vector<jit::Target> targets;
    int threads = 1;
    std::vector<CompileJob> jobs;
    std::vector<JobResult> results;
    double wall_seconds = 0.0;
    std::uint64_t cache_bytes = 0;
    std::uint64_t evicted = 0;

    std::size_t count(Outcome outcome) const;
};

// One row per entry (or source), one column per target; a cell is the
// compile time, "cached" or "FAILED". Then per-target totals, a summary line
// and every failure with its message.
std::string prewarm_table(const PrewarmRun& run);
std::string prewarm_json(const PrewarmRun& run);

}  // namespace nbits::prewarm

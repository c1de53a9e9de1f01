#include "prewarm_action.hpp"

#include "local_targets.hpp"
#include "prewarm_report.hpp"
#include "progress_line.hpp"

#include "nbits/error.hpp"
#include "jit/include_dirs.hpp"

#include <fmt/format.h>

#include <chrono>
#include <thread>

namespace nbits::prewarm {

ActionOutput prewarm_images(const PrewarmOptions& options, jit::DiskCache& cache)
{
    PrewarmRun run;
    run.cache_dir = cache.directory();
    run.granularity = options.granularity;
    run.targets = options.targets;
    if (run.targets.empty()) {
        LocalTargets local = local_targets();
        std::fprintf(stderr, "nbits-prewarm: %s\n", local.note.c_str());
        run.targets = std::move(local.targets);
    }
    // The runtime compiles with these very directories; they are part of every key.
    const std::vector<std::string> include_dirs = jit::discover_include_dirs();
    if (include_dirs.empty()) {
        throw Error(ErrorKind::MissingHeaders, jit::missing_half_headers_message("nbits-prewarm"));
    }
    run.jobs = plan_jobs(options, run.targets);
    run.threads = options.jobs > 0 ? options.jobs : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

    ProgressLine progress(run.jobs.size());
    const auto start = std::chrono::steady_clock::now();
    run.results = run_jobs(run.jobs, run.granularity, include_dirs, cache, run.threads,
                           [&](std::size_t index, const JobResult& result) {
                               const CompileJob& job = run.jobs[index];
                               if (result.outcome == Outcome::Failed) {
                                   progress.message(fmt::format("nbits-prewarm: FAILED {} for {}", job.label(),
                                                                job.target.str()));
                               }
                               progress.step(fmt::format("{} {} {} ({:.2f} s)", to_string(result.outcome),
                                                         job.target.str(), job.label(), result.seconds));
                           });
    run.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    run.cache_bytes = cache.total_bytes();
    run.evicted = cache.stats().evicted;

    ActionOutput output;
    output.text = prewarm_table(run);
    output.json = prewarm_json(run);
    output.exit_code = run.count(Outcome::Failed) == 0 ? kExitOk : kExitFailed;
    if (!cache.writable()) {
        output.text += fmt::format("FAILED: {} is not writable; the compiled images were not kept\n", run.cache_dir);
        output.exit_code = kExitFailed;
    }
    return output;
}

}  // namespace nbits::prewarm

#include "compile_jobs.hpp"

#include "nbits/error.hpp"
#include "kernels.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

namespace nbits::prewarm {

std::string CompileJob::label() const { return entry.empty() ? source->name() : source->name() + ":" + entry; }

const char* to_string(Outcome outcome)
{
    switch (outcome) {
    case Outcome::Compiled: return "compiled";
    case Outcome::Cached: return "cached";
    case Outcome::Failed: return "failed";
    }
    return "?";
}

std::vector<CompileJob> plan_jobs(const PrewarmOptions& options, const std::vector<jit::Target>& targets)
{
    std::vector<CompileJob> jobs;
    for (const jit::KernelSource& source : kernels::all()) {
        const bool wanted = options.sources.empty() ||
                            std::find(options.sources.begin(), options.sources.end(), source.name()) !=
                                options.sources.end();
        if (!wanted) {
            continue;
        }
        const std::vector<std::string> entries =
            options.granularity == CompileGranularity::Entry ? source.entries() : std::vector<std::string>{""};
        for (const std::string& entry : entries) {
            for (const jit::Target& target : targets) {
                jobs.push_back({&source, entry, target});
            }
        }
    }
    return jobs;
}

std::vector<JobResult> run_jobs(const std::vector<CompileJob>& jobs, CompileGranularity granularity,
                                const std::vector<std::string>& include_dirs, jit::DiskCache& cache, int threads,
                                const std::function<void(std::size_t index, const JobResult&)>& on_done)
{
    std::vector<JobResult> results(jobs.size());
    std::atomic<std::size_t> next{0};
    std::mutex report_mutex;
    auto work = [&] {
        for (std::size_t index = next.fetch_add(1); index < jobs.size(); index = next.fetch_add(1)) {
            const CompileJob& job = jobs[index];
            JobResult& result = results[index];
            const auto start = std::chrono::steady_clock::now();
            try {
                const jit::CompileRequest request =
                    module_request(*job.source, job.entry, {}, granularity, job.target, include_dirs);
                bool compiled_now = false;
                result.image_bytes = jit::compile_or_load(request, &cache, &compiled_now).image.size();
                result.outcome = compiled_now ? Outcome::Compiled : Outcome::Cached;
            } catch (const std::exception& error) {
                result.outcome = Outcome::Failed;
                result.error = error.what();
            }
            result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            std::lock_guard<std::mutex> lock(report_mutex);
            on_done(index, result);
        }
    };
    std::vector<std::thread> pool;
    const int count = std::max(1, std::min<int>(threads, static_cast<int>(jobs.size())));
    for (int t = 1; t < count; ++t) {
        pool.emplace_back(work);
    }
    work();
    for (std::thread& thread : pool) {
        thread.join();
    }
    return results;
}

}  // namespace nbits::prewarm

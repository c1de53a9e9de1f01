#include "prewarm_report.hpp"

#include "human_units.hpp"
#include "json_writer.hpp"
#include "text_table.hpp"

#include "jit/compile.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace nbits::prewarm {
namespace {

std::string cell(const JobResult& result)
{
    switch (result.outcome) {
    case Outcome::Compiled: return fmt::format("{:.2f} s", result.seconds);
    case Outcome::Cached: return "cached";
    case Outcome::Failed: return "FAILED";
    }
    return "?";
}

}  // namespace

std::size_t PrewarmRun::count(Outcome outcome) const
{
    return static_cast<std::size_t>(std::count_if(results.begin(), results.end(),
                                                  [&](const JobResult& result) { return result.outcome == outcome; }));
}

std::string prewarm_table(const PrewarmRun& run)
{
    // One row per entry (or source), in the order the jobs were planned.
    std::vector<std::string> labels;
    std::map<std::string, std::map<std::string, std::string>> cells;  // label -> target -> cell
    struct Totals {
        std::size_t compiled = 0, cached = 0, failed = 0;
        double seconds = 0.0;
    };
    std::map<std::string, Totals> totals;
    for (std::size_t i = 0; i < run.jobs.size(); ++i) {
        const std::string label = run.jobs[i].label();
        const std::string target = run.jobs[i].target.str();
        if (cells.find(label) == cells.end()) {
            labels.push_back(label);
        }
        cells[label][target] = cell(run.results[i]);
        Totals& total = totals[target];
        total.compiled += run.results[i].outcome == Outcome::Compiled;
        total.cached += run.results[i].outcome == Outcome::Cached;
        total.failed += run.results[i].outcome == Outcome::Failed;
        total.seconds += run.results[i].seconds;
    }
    tools::TextTable matrix;
    matrix.column(to_string(run.granularity), tools::TextTable::Align::Left);
    for (const jit::Target& target : run.targets) {
        matrix.column(target.str());
    }
    for (const std::string& label : labels) {
        std::vector<std::string> row = {label};
        for (const jit::Target& target : run.targets) {
            row.push_back(cells[label][target.str()]);
        }
        matrix.row(std::move(row));
    }
    tools::TextTable per_target;
    per_target.column("target", tools::TextTable::Align::Left);
    for (const char* header : {"compiled", "already cached", "failed", "compile s"}) {
        per_target.column(header);
    }
    for (const jit::Target& target : run.targets) {
        const Totals& total = totals[target.str()];
        per_target.row({target.str(), std::to_string(total.compiled), std::to_string(total.cached),
                        std::to_string(total.failed), fmt::format("{:.1f}", total.seconds)});
    }
    std::string text = matrix.render() + "\n" + per_target.render();
    text += fmt::format(
        "\n{} images ({} granularity, NVRTC {}): {} compiled, {} already cached, {} failed in {:.1f} s on {} "
        "thread(s)\ncache: {} ({})\n",
        run.jobs.size(), to_string(run.granularity), jit::nvrtc_version(), run.count(Outcome::Compiled),
        run.count(Outcome::Cached), run.count(Outcome::Failed), run.wall_seconds, run.threads, run.cache_dir,
        human_bytes(run.cache_bytes));
    if (run.evicted > 0) {
        text += fmt::format(
            "warning: the cache's size bound evicted {} image(s) during this run. How to fix: raise it "
            "(--max-bytes, NBITS_CACHE_MAX_BYTES) so that the prewarmed images stay\n",
            run.evicted);
    }
    for (std::size_t i = 0; i < run.jobs.size(); ++i) {
        if (run.results[i].outcome == Outcome::Failed) {
            text += fmt::format("\nFAILED {} for {}:\n{}\n", run.jobs[i].label(), run.jobs[i].target.str(),
                                run.results[i].error);
        }
    }
    return text;
}

std::string prewarm_json(const PrewarmRun& run)
{
    JsonWriter json;
    json.begin_object()
        .field("action", "prewarm")
        .field("cache_dir", run.cache_dir)
        .field("granularity", to_string(run.granularity))
        .field("nvrtc", jit::nvrtc_version())
        .field("threads", run.threads);
    json.key("targets").begin_array();
    for (const jit::Target& target : run.targets) {
        json.value(target.str());
    }
    json.end_array()
        .field("images", static_cast<std::uint64_t>(run.jobs.size()))
        .field("compiled", static_cast<std::uint64_t>(run.count(Outcome::Compiled)))
        .field("cached", static_cast<std::uint64_t>(run.count(Outcome::Cached)))
        .field("failed", static_cast<std::uint64_t>(run.count(Outcome::Failed)))
        .field("wall_seconds", run.wall_seconds)
        .field("cache_bytes", run.cache_bytes)
        .field("evicted", run.evicted);
    json.key("jobs").begin_array();
    for (std::size_t i = 0; i < run.jobs.size(); ++i) {
        const CompileJob& job = run.jobs[i];
        const JobResult& result = run.results[i];
        json.begin_object()
            .field("source", job.source->name())
            .field("entry", job.entry.empty() ? "*" : job.entry)
            .field("target", job.target.str())
            .field("outcome", to_string(result.outcome))
            .field("seconds", result.seconds)
            .field("bytes", static_cast<std::uint64_t>(result.image_bytes));
        if (!result.error.empty()) {
            json.field("error", result.error);
        }
        json.end_object();
    }
    json.end_array().end_object();
    return json.str();
}

}  // namespace nbits::prewarm

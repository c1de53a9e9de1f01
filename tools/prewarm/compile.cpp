// nbits-prewarm: which images to compile (every entry, or what a model's
// nodes launch), compiling them in parallel with other prewarming
// processes, and the report of a run.

#include "prewarm.hpp"

#include "command_line.hpp"
#include "cuda/driver.hpp"
#include "jit/cache_text.hpp"
#include "json_writer.hpp"
#include "kernels.hpp"
#include "nbits/error.hpp"
#include "nbits/matmul_nbits.hpp"
#include "runtime/module_cache.hpp"
#include "text_table.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unistd.h>

namespace nbits::prewarm {
namespace {

// ---- what to compile -------------------------------------------------------

// The devices a node is planned on when no GPU of the architecture is here:
// the named models of each generation (the plan depends on SM count, shared
// memory and memory bandwidth an SM, so sm_89 is planned on a large, a mid and
// a small part, and sm_90 on the 132 SMs of the H200 and of the H100 SXM, the
// 114 of the PCIe parts and the 78 of the H20).
std::vector<Capabilities> device_models(int sm)
{
    switch (sm) {
    case 80: return {Capabilities::a100()};
    case 86: return {Capabilities::sm86_28()};
    case 89: return {Capabilities::rtx4090(), Capabilities::l4(), Capabilities::sm89_46()};
    case 90: return {Capabilities::h200(), Capabilities::h100(), Capabilities::h100_pcie(), Capabilities::h20()};
    case 100: {
        DeviceAttributes b200;
        b200.compute_major = 10;
        b200.max_threads_per_block = 1024;
        b200.max_shared_memory_per_block = 48 * 1024;
        b200.max_shared_memory_per_block_optin = 227 * 1024;
        b200.multiprocessor_count = 148;
        b200.total_memory_bytes = 180ull << 30;
        b200.name = "NVIDIA B200";
        return {Capabilities::from(b200)};
    }
    case 120: return {Capabilities::rtx5090()};
    default: return {};
    }
}

constexpr const char* kModelledArchitectures = "sm_80, sm_86, sm_89, sm_90, sm_100, sm_120";

TensorDesc desc(DataType type, std::vector<std::size_t> shape)
{
    TensorDesc d;
    d.dtype = type;
    d.shape = std::move(shape);
    return d;
}

TensorDesc absent(DataType type)
{
    TensorDesc d;
    d.dtype = type;
    d.present = false;
    return d;
}

struct NodeTensors {
    ops::MatMulNBitsConfig config;
    std::vector<TensorDesc> inputs;
    std::vector<TensorDesc> outputs;
};

// The descriptors of a well-formed node in the ONNX input order: [A, B,
// scales, zero_points, g_idx, bias, gamma], or the paired gate/up node's
// [A, W_gate, scales_gate, W_up, scales_up, gamma, zp_gate, zp_up].
NodeTensors node_tensors(const NodeSpec& node, std::size_t m)
{
    NodeAttributes attributes;
    attributes.set("K", node.k).set("N", node.n).set("bits", node.bits).set("block_size", node.block_size);
    attributes.set("accuracy_level", node.accuracy_level);
    if (node.bias == NodeSpec::Bias::Folded) {
        attributes.set(ops::kFoldedBiasAttr, std::int64_t{1});
    }
    if (node.gate_up) {
        attributes.set(ops::kGateUpSwigluAttr, std::int64_t{1});
    }
    if (node.rmsnorm) {
        attributes.set(ops::kRmsNormPrologueAttr, std::int64_t{1});
    }
    NodeTensors t;
    t.config = ops::MatMulNBitsConfig::from_attributes(attributes);
    const ops::MatMulNBitsConfig& c = t.config;
    const TensorDesc weight = desc(DataType::Uint8, {c.n, c.k_blocks(), c.blob_size()});
    const TensorDesc scale = desc(node.scales.value_or(node.activation), {c.n, c.k_blocks()});
    const TensorDesc zero_points =
        node.zero_points ? desc(DataType::Uint8, {c.n, c.zp_row_bytes()}) : absent(DataType::Uint8);
    const TensorDesc gamma = node.rmsnorm ? desc(node.activation, {c.k}) : absent(node.activation);
    t.inputs = {desc(node.activation, {m, c.k}), weight, scale};
    if (c.gate_up_swiglu) {
        t.inputs.insert(t.inputs.end(), {weight, scale, gamma, zero_points, zero_points});
    } else {
        const TensorDesc bias =
            node.bias != NodeSpec::Bias::None ? desc(node.activation, {c.n}) : absent(node.activation);
        t.inputs.insert(t.inputs.end(), {zero_points, absent(DataType::Int32), bias, gamma});
    }
    t.outputs = {desc(node.activation, {m, c.n})};
    return t;
}

bool source_selected(const PrewarmOptions& options, const std::string& name)
{
    return options.sources.empty() ||
           std::find(options.sources.begin(), options.sources.end(), name) != options.sources.end();
}

std::string join(const std::vector<std::string>& items, const char* separator)
{
    std::string text;
    for (const std::string& item : items) {
        text += (text.empty() ? "" : separator) + item;
    }
    return text;
}

// Unique (source, entry, defines) in first-seen order, each with its targets.
class JobSet {
public:
    void add(const jit::KernelSource& source, const std::string& entry, const jit::Defines& defines,
             const jit::Target& target)
    {
        const std::string key = source.name() + '\n' + entry + '\n' + join(defines, "\n");
        auto [at, inserted] = index_.emplace(key, specs_.size());
        if (inserted) {
            specs_.push_back({&source, entry, defines, {}});
        }
        std::vector<jit::Target>& targets = specs_[at->second].targets;
        if (std::find(targets.begin(), targets.end(), target) == targets.end()) {
            targets.push_back(target);
        }
    }

    // Label-major, then the targets in the order given (an arch-specific
    // target, sm_90a, in the place of its architecture).
    std::vector<CompileJob> jobs(const std::vector<jit::Target>& order) const
    {
        std::vector<CompileJob> jobs;
        for (const Spec& spec : specs_) {
            for (const jit::Target& target : order) {
                for (const jit::Target& wanted : spec.targets) {
                    if (wanted.major == target.major && wanted.minor == target.minor && wanted.kind == target.kind) {
                        jobs.push_back({spec.source, spec.entry, spec.defines, wanted});
                    }
                }
            }
        }
        return jobs;
    }

private:
    struct Spec {
        const jit::KernelSource* source;
        std::string entry;
        jit::Defines defines;
        std::vector<jit::Target> targets;
    };
    std::vector<Spec> specs_;
    std::map<std::string, std::size_t> index_;
};

// ---- compiling -------------------------------------------------------------

enum class Outcome { Compiled, Cached, Failed };

const char* to_string(Outcome outcome)
{
    switch (outcome) {
    case Outcome::Compiled: return "compiled";
    case Outcome::Cached: return "cached";
    case Outcome::Failed: return "failed";
    }
    return "?";
}

struct JobResult {
    Outcome outcome = Outcome::Failed;
    bool waited = false;  // another process held its claim: it compiled the image
    double seconds = 0.0;
    std::size_t image_bytes = 0;
    std::string error;
};

// "[ 12/124] compiled sm_90 gemv_f16:matmul_nbits_gemv_f16 (1.3 s)" on one
// line of a terminal, rewritten in place; silent when stderr is not a
// terminal (logs get the summary only). Messages always print, on a line of
// their own.
class ProgressLine {
public:
    explicit ProgressLine(std::size_t total) : total_(total), terminal_(::isatty(STDERR_FILENO) == 1) {}
    ~ProgressLine() { clear_line(); }
    ProgressLine(const ProgressLine&) = delete;
    ProgressLine& operator=(const ProgressLine&) = delete;

    void step(const std::string& text)
    {
        ++done_;
        if (!terminal_) {
            return;
        }
        const int width = static_cast<int>(fmt::formatted_size("{}", total_));
        std::string line = jit::printable(fmt::format("[{:>{}}/{}] {}", done_, width, total_, text));
        if (line.size() > 100) {
            line = line.substr(0, 97) + "...";
        }
        std::fprintf(stderr, "\r\033[K%s", line.c_str());
        std::fflush(stderr);
        shown_ = true;
    }

    void message(const std::string& text)
    {
        clear_line();
        std::fprintf(stderr, "%s\n", jit::printable(text, true).c_str());
    }

private:
    void clear_line()
    {
        if (shown_) {
            std::fputs("\r\033[K", stderr);
            shown_ = false;
        }
    }

    std::size_t total_;
    std::size_t done_ = 0;
    bool terminal_;
    bool shown_ = false;
};

// How long a worker waits before looking again at an image another process
// is compiling.
constexpr auto kClaimPoll = std::chrono::milliseconds(20);

// Runs `jobs` on `threads` threads, each image through the key a runtime
// looks up. An image another process has claimed is set aside and taken up
// again after the unclaimed ones: by then it is usually stored, and loads.
std::vector<JobResult> run_jobs(const std::vector<CompileJob>& jobs, CompileGranularity granularity,
                                jit::DiskCache& cache, int threads,
                                const std::function<void(std::size_t index, const JobResult&)>& on_done)
{
    std::vector<JobResult> results(jobs.size());
    std::mutex mutex;
    std::deque<std::size_t> pending;
    std::deque<std::size_t> waiting;
    for (std::size_t i = 0; i < jobs.size(); ++i) {
        pending.push_back(i);
    }
    // Returns false when the image is claimed elsewhere and not stored yet.
    auto attempt = [&](std::size_t index, bool waited, const std::chrono::steady_clock::time_point start) {
        const CompileJob& job = jobs[index];
        JobResult& result = results[index];
        const jit::CompileRequest request =
            module_request(*job.source, job.entry, job.defines, granularity, job.target);
        const jit::ImageKey key = jit::ImageKey::for_request(request);
        auto finish = [&](Outcome outcome) {
            result.outcome = outcome;
            result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            return true;
        };
        if (std::optional<std::string> image = cache.load(key)) {
            result.image_bytes = image->size();
            result.waited = waited;
            return finish(Outcome::Cached);
        }
        jit::ImageClaim claim = cache.claim(key);
        if (claim.state() == jit::ImageClaim::State::HeldElsewhere) {
            return false;
        }
        if (claim.state() == jit::ImageClaim::State::Acquired) {
            // Stored between the load above and the claim by the process that held it.
            if (std::optional<std::string> image = cache.load(key)) {
                result.image_bytes = image->size();
                result.waited = true;
                return finish(Outcome::Cached);
            }
        }
        if (!cache.writable()) {
            result.error = fmt::format("not compiled: {} is not writable", cache.directory());
            return finish(Outcome::Failed);
        }
        const jit::CompiledImage compiled = jit::compile(request);
        result.image_bytes = compiled.image.size();
        if (std::optional<std::string> why = cache.try_store(key, compiled.image)) {
            result.error = "compiled, but not stored: " + *why;
            return finish(Outcome::Failed);
        }
        return finish(Outcome::Compiled);
    };
    auto work = [&] {
        for (;;) {
            std::size_t index = 0;
            bool waited = false;
            {
                std::lock_guard<std::mutex> lock(mutex);
                if (!pending.empty()) {
                    index = pending.front();
                    pending.pop_front();
                } else if (!waiting.empty()) {
                    index = waiting.front();
                    waiting.pop_front();
                    waited = true;
                } else {
                    return;
                }
            }
            if (waited) {
                std::this_thread::sleep_for(kClaimPoll);
            }
            const auto start = std::chrono::steady_clock::now();
            bool done = true;
            try {
                done = attempt(index, waited, start);
            } catch (const std::exception& error) {
                results[index].outcome = Outcome::Failed;
                results[index].error = error.what();
                results[index].seconds =
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            }
            std::lock_guard<std::mutex> lock(mutex);
            if (done) {
                on_done(index, results[index]);
            } else {
                waiting.push_back(index);
            }
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

// ---- the report ------------------------------------------------------------

struct PrewarmRun {
    std::string cache_dir;
    CompileGranularity granularity = CompileGranularity::Entry;
    std::vector<jit::Target> targets;
    std::vector<KernelPolicy> policies;
    const std::vector<NodeSpec>* nodes = nullptr;
    int threads = 1;
    JobPlan plan;
    std::vector<JobResult> results;
    double wall_seconds = 0.0;
    std::uint64_t cache_bytes = 0;
    std::uint64_t evicted = 0;

    std::size_t count(Outcome outcome) const
    {
        return static_cast<std::size_t>(std::count_if(results.begin(), results.end(),
                                                      [&](const JobResult& r) { return r.outcome == outcome; }));
    }
    std::size_t waited() const
    {
        return static_cast<std::size_t>(std::count_if(results.begin(), results.end(), [](const JobResult& r) {
            return r.outcome == Outcome::Cached && r.waited;
        }));
    }
};

std::string cell(const JobResult& result)
{
    switch (result.outcome) {
    case Outcome::Compiled: return fmt::format("{:.2f} s", result.seconds);
    case Outcome::Cached: return "cached";
    case Outcome::Failed: return "FAILED";
    }
    return "?";
}

std::string nodes_text(const PrewarmRun& run)
{
    if (run.nodes == nullptr || run.nodes->empty()) {
        return "";
    }
    std::vector<std::string> policies;
    for (KernelPolicy policy : run.policies) {
        policies.emplace_back(to_string(policy));
    }
    std::string text = fmt::format("{} node(s), planned under policy {}:\n", run.nodes->size(), join(policies, " and "));
    for (const NodeSpec& node : *run.nodes) {
        text += fmt::format("  {}  ({})\n", node.describe(), node.origin);
    }
    text += "on:\n";
    for (const TargetDevices& target : run.plan.devices) {
        std::vector<std::string> names;
        for (const Capabilities& device : target.devices) {
            names.push_back(fmt::format("{} ({} SMs)", device.name, device.multiprocessor_count));
        }
        text += fmt::format("  {}: {}\n", target.target.str(), join(names, ", "));
    }
    return jit::printable(text, true) + "\n";
}

std::string failures_text(const JobPlan& plan)
{
    std::string text;
    for (const std::string& failure : plan.failures) {
        text += "FAILED: " + failure + "\n";
    }
    return jit::printable(text, true);
}

// One row per entry (or source) and specialisation, one column per target;
// a cell is the compile time, "cached" or "FAILED". Then per-target totals, a
// summary line and every failure with its message.
std::string prewarm_table(const PrewarmRun& run)
{
    const std::vector<CompileJob>& jobs = run.plan.jobs;
    std::vector<std::string> labels;
    std::map<std::string, std::map<std::string, std::string>> cells;  // label -> target -> cell
    struct Totals {
        std::size_t compiled = 0, cached = 0, failed = 0;
        double seconds = 0.0;
    };
    std::map<std::string, Totals> totals;
    for (std::size_t i = 0; i < jobs.size(); ++i) {
        // An arch-specific image (sm_90a) sits in its architecture's column, marked in its row.
        jit::Target column = jobs[i].target;
        column.arch_specific = false;
        const std::string label =
            jobs[i].label() + (jobs[i].target.arch_specific ? " (" + jobs[i].target.str() + ")" : "");
        const std::string target = column.str();
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
    std::string text = nodes_text(run) + matrix.render() + "\n" + per_target.render();
    const std::size_t waited = run.waited();
    text += fmt::format(
        "\n{} images ({} granularity, NVRTC {}): {} compiled, {} already cached{}, {} failed in {:.1f} s on {} "
        "thread(s)\ncache: {} ({})\n",
        jobs.size(), to_string(run.granularity), jit::nvrtc_version(), run.count(Outcome::Compiled),
        run.count(Outcome::Cached), waited > 0 ? fmt::format(" ({} compiled meanwhile by another process)", waited) : "",
        run.count(Outcome::Failed), run.wall_seconds, run.threads, jit::printable(run.cache_dir),
        human_bytes(run.cache_bytes));
    if (run.evicted > 0) {
        text += fmt::format(
            "warning: the cache's size bound evicted {} image(s) during this run. How to fix: raise it "
            "(--max-bytes, NBITS_CACHE_MAX_BYTES) so that the prewarmed images stay\n",
            run.evicted);
    }
    for (std::size_t i = 0; i < jobs.size(); ++i) {
        if (run.results[i].outcome == Outcome::Failed) {
            text += jit::printable(fmt::format("\nFAILED {} for {}:\n{}\n", jobs[i].label(), jobs[i].target.str(),
                                               run.results[i].error),
                                   true);
        }
    }
    if (!run.plan.failures.empty()) {
        text += "\n" + failures_text(run.plan);
    }
    return text;
}

void job_fields(JsonWriter& json, const CompileJob& job)
{
    json.field("source", job.source->name()).field("entry", job.entry.empty() ? "*" : job.entry);
    json.key("defines").begin_array();
    for (const std::string& define : job.defines) {
        json.value(define);
    }
    json.end_array().field("target", job.target.str());
}

void plan_fields(JsonWriter& json, const PrewarmOptions& options, const JobPlan& plan)
{
    json.key("nodes").begin_array();
    for (const NodeSpec& node : options.nodes) {
        json.begin_object().field("node", node.describe()).field("origin", node.origin).end_object();
    }
    json.end_array();
    json.key("policies").begin_array();
    for (KernelPolicy policy : options.policies) {
        json.value(to_string(policy));
    }
    json.end_array();
    json.key("devices").begin_array();
    for (const TargetDevices& target : plan.devices) {
        for (const Capabilities& device : target.devices) {
            json.begin_object()
                .field("target", target.target.str())
                .field("name", device.name)
                .field("multiprocessors", device.multiprocessor_count)
                .end_object();
        }
    }
    json.end_array();
    json.key("plan_failures").begin_array();
    for (const std::string& failure : plan.failures) {
        json.value(failure);
    }
    json.end_array();
}

std::string prewarm_json(const PrewarmRun& run, const PrewarmOptions& options)
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
    json.end_array();
    plan_fields(json, options, run.plan);
    json.field("images", static_cast<std::uint64_t>(run.plan.jobs.size()))
        .field("compiled", static_cast<std::uint64_t>(run.count(Outcome::Compiled)))
        .field("cached", static_cast<std::uint64_t>(run.count(Outcome::Cached)))
        .field("cached_from_other_processes", static_cast<std::uint64_t>(run.waited()))
        .field("failed", static_cast<std::uint64_t>(run.count(Outcome::Failed)))
        .field("wall_seconds", run.wall_seconds)
        .field("cache_bytes", run.cache_bytes)
        .field("evicted", run.evicted);
    json.key("jobs").begin_array();
    for (std::size_t i = 0; i < run.plan.jobs.size(); ++i) {
        const JobResult& result = run.results[i];
        json.begin_object();
        job_fields(json, run.plan.jobs[i]);
        json.field("outcome", to_string(result.outcome))
            .field("waited", result.waited)
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

ActionOutput dry_run_output(const PrewarmOptions& options, const std::vector<jit::Target>& targets,
                            const JobPlan& plan)
{
    PrewarmRun run;
    run.policies = options.policies;
    run.nodes = &options.nodes;
    run.plan = plan;
    tools::TextTable table;
    table.column("target", tools::TextTable::Align::Left);
    table.column(to_string(options.granularity), tools::TextTable::Align::Left);
    JsonWriter json;
    json.begin_object().field("action", "dry-run").field("granularity", to_string(options.granularity));
    json.key("targets").begin_array();
    for (const jit::Target& target : targets) {
        json.value(target.str());
    }
    json.end_array();
    plan_fields(json, options, plan);
    json.field("images", static_cast<std::uint64_t>(plan.jobs.size()));
    json.key("jobs").begin_array();
    for (const CompileJob& job : plan.jobs) {
        table.row({job.target.str(), job.label()});
        json.begin_object();
        job_fields(json, job);
        json.end_object();
    }
    json.end_array().end_object();
    ActionOutput output;
    output.json = json.str();
    output.text = nodes_text(run) + jit::printable(table.render(), true) +
                  fmt::format("\n{} image(s) would be compiled (NVRTC {})\n", plan.jobs.size(), jit::nvrtc_version());
    if (!plan.failures.empty()) {
        output.text += "\n" + failures_text(plan);
        output.exit_code = kExitFailed;
    }
    return output;
}

}  // namespace

std::string CompileJob::label() const
{
    std::string label = entry.empty() ? source->name() : source->name() + ":" + entry;
    for (const std::string& define : defines) {
        label += " -D" + define;
    }
    return label;
}

std::vector<Capabilities> local_devices()
{
    std::vector<Capabilities> devices;
    if (!cuda::driver_available()) {
        return devices;
    }
    const cuda::Driver& d = cuda::driver();
    int count = 0;
    if (d.device_get_count(&count) != CUDA_SUCCESS) {
        return devices;
    }
    for (int ordinal = 0; ordinal < count; ++ordinal) {
        CUdevice device = 0;
        if (d.device_get(&device, ordinal) != CUDA_SUCCESS) {
            continue;
        }
        const auto attribute = [&](CUdevice_attribute which) {
            int value = 0;
            return d.device_get_attribute(&value, which, device) == CUDA_SUCCESS ? value : 0;
        };
        DeviceAttributes attributes;
        char name[256] = {};
        if (d.device_get_name(name, sizeof(name), device) == CUDA_SUCCESS) {
            attributes.name = name;
        }
        attributes.compute_major = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
        attributes.compute_minor = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
        attributes.max_threads_per_block = attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
        attributes.max_threads_per_multiprocessor = attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
        attributes.max_shared_memory_per_block = attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
        attributes.max_shared_memory_per_block_optin = attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
        attributes.multiprocessor_count = attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
        try {
            devices.push_back(Capabilities::from(attributes));
        } catch (const Error&) {
            // A device without a compute capability cannot run nbits; nothing to prewarm for it.
        }
    }
    return devices;
}

JobPlan plan_jobs(const PrewarmOptions& options, const std::vector<jit::Target>& targets,
                  const std::vector<Capabilities>& local)
{
    JobPlan plan;
    JobSet set;
    if (options.nodes.empty()) {
        for (const jit::KernelSource& source : kernels::all()) {
            if (!source_selected(options, source.name())) {
                continue;
            }
            const std::vector<std::string> entries = options.granularity == CompileGranularity::Entry
                                                         ? source.entries()
                                                         : std::vector<std::string>{""};
            for (const std::string& entry : entries) {
                for (const jit::Target& target : targets) {
                    set.add(source, entry, {}, target);
                }
            }
        }
        plan.jobs = set.jobs(targets);
        return plan;
    }

    // A node on this machine's GPU of the architecture plans as that GPU;
    // elsewhere as each named model of the architecture.
    for (const jit::Target& target : targets) {
        TargetDevices devices{target, device_models(target.sm())};
        for (const Capabilities& device : local) {
            if (device.sm() == target.sm()) {
                devices.devices.push_back(device);
            }
        }
        if (devices.devices.empty()) {
            throw tools::UsageError(fmt::format(
                "--arch {}: nbits has no model of a {} GPU to plan the nodes on, and this machine has none. How "
                "to fix: prewarm these nodes for {} on a machine with such a GPU, or choose among {}",
                target.str(), target.str(), target.str(), kModelledArchitectures));
        }
        plan.devices.push_back(std::move(devices));
    }
    for (const NodeSpec& node : options.nodes) {
        // One line per distinct reason, with where it first happened.
        std::map<std::string, std::pair<std::string, std::size_t>> failures;
        std::vector<std::string> failure_order;
        auto fail = [&](const std::string& why, const std::string& where) {
            auto [at, inserted] = failures.emplace(why, std::make_pair(where, std::size_t{0}));
            if (inserted) {
                failure_order.push_back(why);
            }
            ++at->second.second;
        };
        const ops::PlanOverrides overrides = ops::PlanOverrides::from_environment();
        for (const TargetDevices& target : plan.devices) {
            for (const Capabilities& device : target.devices) {
                for (KernelPolicy policy : options.policies) {
                    for (std::int64_t m : node.m) {
                        const std::string where =
                            fmt::format("{} ({}), policy {}, M={}", device.name, target.target.str(),
                                        to_string(policy), m);
                        try {
                            const NodeTensors tensors = node_tensors(node, static_cast<std::size_t>(m));
                            ops::PlanContext context;
                            context.capabilities = device;
                            context.policy = policy;
                            // The developer overrides a runtime on this machine would read (split-K
                            // clusters specialise the prefill GEMM).
                            context.overrides = overrides;
                            const ops::LaunchPlan launch =
                                ops::plan_matmul_nbits(tensors.config, tensors.inputs, tensors.outputs, context);
                            for (const ops::PlanStep& step : launch.steps) {
                                const auto* kernel = std::get_if<ops::KernelStep>(&step);
                                if (kernel == nullptr || !source_selected(options, kernel->source)) {
                                    continue;  // cuBLASLt steps compile nothing
                                }
                                const jit::KernelSource& source = kernels::source(kernel->source);
                                const std::string entry =
                                    options.granularity == CompileGranularity::Entry ? kernel->entry : "";
                                jit::Target job_target = target.target;
                                job_target.arch_specific = kernel->arch_specific;
                                set.add(source, entry, kernel->defines, job_target);
                            }
                        } catch (const std::exception& error) {
                            fail(error.what(), where);
                        }
                    }
                }
            }
        }
        for (const std::string& why : failure_order) {
            const auto& [where, times] = failures[why];
            plan.failures.push_back(fmt::format("{} ({}) cannot be planned on {}{}: {}", node.origin,
                                                node.describe(), where,
                                                times > 1 ? fmt::format(" and {} more", times - 1) : "", why));
        }
    }
    plan.jobs = set.jobs(targets);
    return plan;
}

ActionOutput prewarm_images(const PrewarmOptions& options, jit::DiskCache* cache)
{
    std::vector<jit::Target> targets = options.targets;
    std::vector<Capabilities> local = local_devices();
    if (targets.empty()) {
        for (const Capabilities& device : local) {
            const jit::Target target = jit::Target::cubin(device.compute_major, device.compute_minor);
            if (std::find(targets.begin(), targets.end(), target) == targets.end()) {
                targets.push_back(target);
            }
        }
        if (targets.empty()) {
            targets.push_back(jit::Target::cubin(9, 0));
            std::fprintf(stderr, "nbits-prewarm: --arch not given and no GPU here: compiling for sm_90\n");
        } else {
            std::fprintf(stderr, "nbits-prewarm: --arch not given: compiling for this machine's GPUs (%zu device(s))\n",
                         local.size());
        }
    }
    JobPlan plan = plan_jobs(options, targets, local);
    if (cache == nullptr) {
        return dry_run_output(options, targets, plan);
    }

    PrewarmRun run;
    run.cache_dir = cache->directory();
    run.granularity = options.granularity;
    run.targets = targets;
    run.policies = options.policies;
    run.nodes = &options.nodes;
    run.plan = std::move(plan);
    run.threads = options.jobs > 0 ? options.jobs : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    if (::access(cache->directory().c_str(), W_OK) != 0) {
        throw Error(ErrorKind::Io,
                    fmt::format("cannot write compiled images into {}: {}. How to fix: make it writable, or name "
                                "another directory with --cache-dir",
                                cache->directory(), std::strerror(errno)));
    }

    const std::vector<CompileJob>& jobs = run.plan.jobs;
    ProgressLine progress(jobs.size());
    const auto start = std::chrono::steady_clock::now();
    run.results = run_jobs(jobs, run.granularity, *cache, run.threads,
                           [&](std::size_t index, const JobResult& result) {
                               const CompileJob& job = jobs[index];
                               if (result.outcome == Outcome::Failed) {
                                   progress.message(fmt::format("nbits-prewarm: FAILED {} for {}", job.label(),
                                                                job.target.str()));
                               }
                               progress.step(fmt::format("{} {} {} ({:.2f} s)", to_string(result.outcome),
                                                         job.target.str(), job.label(), result.seconds));
                           });
    run.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    run.cache_bytes = cache->total_bytes();
    run.evicted = cache->stats().evicted;

    ActionOutput output;
    output.text = prewarm_table(run);
    output.json = prewarm_json(run, options);
    output.exit_code = run.count(Outcome::Failed) == 0 && run.plan.failures.empty() ? kExitOk : kExitFailed;
    if (!cache->writable()) {
        output.text += fmt::format("FAILED: {} stopped accepting images during the run; the images listed as "
                                   "failed were not kept\n",
                                   jit::printable(run.cache_dir));
        output.exit_code = kExitFailed;
    }
    return output;
}

}  // namespace nbits::prewarm

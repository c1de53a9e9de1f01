// nbits-startup's measurements: NVRTC alone (no GPU), and fresh processes
// getting the decode step's functions per cache mode (GPU).

#include "startup.hpp"

#include "jit/compile.hpp"
#include "jit/disk_cache.hpp"
#include "kernels.hpp"
#include "nbits/error.hpp"
#include "nbits/runtime.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>

namespace nbits::startup {
namespace {

// ---- NVRTC alone -----------------------------------------------------------

struct Timed {
    double wall = 0.0;
    double cpu = 0.0;
    std::size_t bytes = 0;

    Timed& operator+=(const Timed& other)
    {
        wall += other.wall;
        cpu += other.cpu;
        return *this;
    }
    void add_to(CompileSeconds& seconds) const
    {
        seconds.wall.add(wall);
        seconds.cpu.add(cpu);
    }
};

double process_cpu_seconds()
{
    timespec now{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
    return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

Timed timed_compile(const jit::CompileRequest& request)
{
    const double cpu_start = process_cpu_seconds();
    const auto start = std::chrono::steady_clock::now();
    const jit::CompiledImage image = jit::compile(request);
    Timed timed;
    timed.wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    timed.cpu = process_cpu_seconds() - cpu_start;
    timed.bytes = image.image.size();
    return timed;
}

std::string load_average()
{
    std::ifstream file("/proc/loadavg");
    std::string one, five, fifteen;
    file >> one >> five >> fifteen;
    return one + " " + five + " " + fifteen;
}

// ---- fresh processes on the GPU --------------------------------------------

// A directory of throw-away cache directories, removed with its contents.
class ScratchDir {
public:
    // Under `parent`, or $TMPDIR (else /tmp) when it is empty. Throws Error(Io).
    explicit ScratchDir(const std::string& parent);
    ~ScratchDir();
    ScratchDir(const ScratchDir&) = delete;
    ScratchDir& operator=(const ScratchDir&) = delete;

    // A path inside it (not created: the disk cache creates its directory).
    std::string path(const std::string& leaf) const { return root_ + "/" + leaf; }

private:
    std::string root_;
};

ScratchDir::ScratchDir(const std::string& parent)
{
    const char* tmpdir = std::getenv("TMPDIR");
    std::string pattern = (parent.empty() ? std::string(tmpdir && *tmpdir ? tmpdir : "/tmp") : parent) +
                          "/nbits-startup-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
        throw Error(ErrorKind::Io, "cannot create a scratch directory " + pattern + ": " + std::strerror(errno) +
                                       ". How to fix: pass --work-dir with a writable directory");
    }
    root_ = pattern;
}

ScratchDir::~ScratchDir()
{
    std::error_code ignored;
    std::filesystem::remove_all(root_, ignored);
}

// Fills `directory` with the CUBINs a runtime on this GPU looks up first,
// exactly as nbits-prewarm --arch sm_XY would.
double prewarm(const std::string& directory, const jit::Target& target)
{
    const auto start = std::chrono::steady_clock::now();
    jit::DiskCache cache(directory, jit::kDefaultCacheMaxBytes);
    for (std::string_view entry : kDecodeStepEntries) {
        jit::compile_or_load(
            module_request(kernels::source_of_entry(entry), entry, {}, CompileGranularity::Entry, target), &cache);
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void run_mode(ModeResult& mode, const std::string& cache_dir, CompileGranularity granularity, int device,
              std::int64_t hits, GpuMeasurement* hit_samples, bool prepare = false, JitImage image = JitImage::Ptx)
{
    std::vector<std::string> arguments = {
        "--child", "--cache-dir", cache_dir, "--granularity", to_string(granularity),
        "--device", std::to_string(device), "--child-hits", std::to_string(hits), "--jit-image", to_string(image)};
    if (prepare) {
        arguments.emplace_back("--prepare");
    }
    // The driver's own JIT cache would hide the PTX-to-SASS step of a cold start.
    const std::map<std::string, std::string> environment = {
        {"CUDA_CACHE_DISABLE", "1"}, {"NBITS_CACHE", "on"}, {"NBITS_CACHE_DIR", ""}, {"NBITS_CACHE_MAX_BYTES", ""}};
    const ChildRun run = spawn_self(arguments, environment);
    const std::optional<ChildTimings> timings = parse_child_output(run.output);
    if (run.exit_code != 0 || !timings) {
        mode.failure = "the child process failed (exit " + std::to_string(run.exit_code) + "):\n" + run.output;
        return;
    }
    const ChildTimings& t = *timings;
    const double ms = 1e-6;
    const double before_runtime = t.at("spawn_to_main_ns") + t.at("runtime_ns");
    mode.spawn_to_main_ms.add(t.at("spawn_to_main_ns") * ms);
    mode.runtime_init_ms.add(t.at("runtime_ns") * ms);
    mode.first_ms.add(t.at("first_ns") * ms);
    mode.all_ms.add(t.at("all_ns") * ms);
    mode.process_to_first_ms.add((before_runtime + t.at("first_ns")) * ms);
    mode.process_to_all_ms.add((before_runtime + t.at("all_ns")) * ms);
    mode.compiles.add(t.at("compiles"));
    if (hit_samples != nullptr) {
        hit_samples->hit_ns.add(t.at("hit_ns"));
        hit_samples->hit_current_ns.add(t.at("hit_current_ns"));
    }
}

}  // namespace

CompileMeasurement measure_compiles(const StartupOptions& options)
{
    CompileMeasurement measurement;
    measurement.repeats = options.repeats;
    measurement.hardware_threads = std::thread::hardware_concurrency();
    measurement.load_average = load_average();

    std::vector<const jit::KernelSource*> step_sources;
    for (std::string_view entry : kDecodeStepEntries) {
        const jit::KernelSource* source = &kernels::source_of_entry(entry);
        if (std::find(step_sources.begin(), step_sources.end(), source) == step_sources.end()) {
            step_sources.push_back(source);
        }
    }
    const jit::KernelSource& first_source = kernels::source_of_entry(kDecodeStepEntries[0]);
    measurement.first_source_name = first_source.name();

    const jit::KernelSource tiny("nvrtc_first_use", "extern \"C\" __global__ void nvrtc_first_use() {}\n");
    measurement.nvrtc_first_use_s =
        timed_compile(module_request(tiny, "", {}, CompileGranularity::Source, jit::Target::ptx(8, 0))).wall;

    // What a runtime on an H200 compiles cold (PTX), and what nbits-prewarm compiles for it (CUBIN).
    for (const jit::Target& target : {jit::Target::ptx(9, 0), jit::Target::cubin(9, 0)}) {
        TargetCompileTimes times;
        times.target = target;
        for (int r = 0; r < options.repeats; ++r) {
            std::fprintf(stderr, "nbits-startup: %s round %d of %d\n", target.str().c_str(), r + 1, options.repeats);
            Timed entries_total;
            for (std::string_view entry : kDecodeStepEntries) {
                const Timed timed = timed_compile(module_request(kernels::source_of_entry(entry), entry, {},
                                                                 CompileGranularity::Entry, target));
                entries_total += timed;
                if (entry == kDecodeStepEntries[0]) {
                    timed.add_to(times.first_entry);
                    times.first_entry_bytes.add(static_cast<double>(timed.bytes));
                }
            }
            entries_total.add_to(times.step_entries);
            Timed sources_total;
            for (const jit::KernelSource* source : step_sources) {
                const Timed timed =
                    timed_compile(module_request(*source, "", {}, CompileGranularity::Source, target));
                sources_total += timed;
                if (source == &first_source) {
                    timed.add_to(times.first_source);
                    times.first_source_bytes.add(static_cast<double>(timed.bytes));
                }
            }
            sources_total.add_to(times.step_sources);
        }
        measurement.targets.push_back(std::move(times));
    }
    return measurement;
}

bool GpuMeasurement::failed() const
{
    for (const ModeResult& m : modes) {
        if (!m.failure.empty()) {
            return true;
        }
    }
    return false;
}

const ModeResult& GpuMeasurement::mode(const std::string& key) const
{
    for (const ModeResult& m : modes) {
        if (m.key == key) {
            return m;
        }
    }
    throw Error(ErrorKind::InvalidArgument, "no measured mode " + key);
}

GpuMeasurement measure_gpu(const StartupOptions& options)
{
    GpuMeasurement measurement;
    jit::Target target;
    {
        RuntimeOptions probe_options;
        probe_options.device = options.device;
        probe_options.disk_cache.enabled = false;
        const CudaRuntime probe(probe_options);
        measurement.gpu_name = probe.capabilities().name;
        target = jit::Target::cubin(probe.capabilities().compute_major, probe.capabilities().compute_minor);
    }
    measurement.cubin_target = target.str();
    measurement.repeats = options.repeats;
    measurement.hits = options.hits;

    ScratchDir scratch(options.work_dir);
    const std::string prewarmed = scratch.path("prewarmed");
    std::fprintf(stderr, "nbits-startup: prewarming %s images of the decode step...\n", target.str().c_str());
    measurement.prewarm_seconds = prewarm(prewarmed, target);

    measurement.modes = {
        {"cold_entry", "cold: empty cache, per-entry compile"},
        {"cold_source", "cold: empty cache, whole-source compile"},
        {"warm_cubin", "warm: prewarmed " + target.str() + " CUBIN"},
        {"warm_ptx", "warm: PTX a cold run left"},
        {"cold_prepared", "cold: empty cache, per entry, CudaRuntime::prepare (parallel)"},
        {"cold_entry_cubin", "cold: empty cache, per entry, NVRTC to CUBIN"},
        {"cold_prepared_cubin", "cold: empty cache, per entry, NVRTC to CUBIN, CudaRuntime::prepare (parallel)"},
    };
    ModeResult& cold_entry = measurement.modes[0];
    ModeResult& cold_source = measurement.modes[1];
    ModeResult& warm_cubin = measurement.modes[2];
    ModeResult& warm_ptx = measurement.modes[3];
    ModeResult& cold_prepared = measurement.modes[4];
    ModeResult& cold_entry_cubin = measurement.modes[5];
    ModeResult& cold_prepared_cubin = measurement.modes[6];
    // Modes interleave within each repeat, so that drift in the machine's
    // state spreads over all of them alike.
    for (int r = 0; r < options.repeats && !measurement.failed(); ++r) {
        std::fprintf(stderr, "nbits-startup: round %d of %d\n", r + 1, options.repeats);
        const std::string cold_dir = scratch.path("cold-entry-" + std::to_string(r));
        run_mode(cold_entry, cold_dir, CompileGranularity::Entry, options.device, 0, nullptr);
        run_mode(cold_source, scratch.path("cold-source-" + std::to_string(r)), CompileGranularity::Source,
                 options.device, 0, nullptr);
        run_mode(warm_cubin, prewarmed, CompileGranularity::Entry, options.device, options.hits, &measurement);
        run_mode(warm_ptx, cold_dir, CompileGranularity::Entry, options.device, 0, nullptr);
        run_mode(cold_prepared, scratch.path("cold-prepared-" + std::to_string(r)), CompileGranularity::Entry,
                 options.device, 0, nullptr, true);
        run_mode(cold_entry_cubin, scratch.path("cold-entry-cubin-" + std::to_string(r)), CompileGranularity::Entry,
                 options.device, 0, nullptr, false, JitImage::Cubin);
        run_mode(cold_prepared_cubin, scratch.path("cold-prepared-cubin-" + std::to_string(r)),
                 CompileGranularity::Entry, options.device, 0, nullptr, true, JitImage::Cubin);
    }
    return measurement;
}

}  // namespace nbits::startup

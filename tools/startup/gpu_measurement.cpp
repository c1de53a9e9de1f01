#include "gpu_measurement.hpp"

#include "child.hpp"
#include "decode_step.hpp"
#include "scratch_dir.hpp"
#include "spawn_self.hpp"

#include "nbits/error.hpp"
#include "jit/disk_cache.hpp"
#include "jit/include_dirs.hpp"
#include "kernels.hpp"
#include "nbits/runtime.hpp"

#include <chrono>
#include <cstdio>

namespace nbits::startup {
namespace {

// Fills `directory` with the CUBINs a runtime on this GPU looks up first,
// exactly as nbits-prewarm --arch sm_XY would.
double prewarm(const std::string& directory, const jit::Target& target)
{
    const auto start = std::chrono::steady_clock::now();
    jit::DiskCache cache(directory, jit::kDefaultCacheMaxBytes);
    const std::vector<std::string> include_dirs = jit::discover_include_dirs();
    for (std::string_view entry : kDecodeStepEntries) {
        jit::compile_or_load(
            module_request(kernels::source_of_entry(entry), entry, {}, CompileGranularity::Entry, target, include_dirs),
            &cache);
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void run_mode(ModeResult& mode, const std::string& cache_dir, CompileGranularity granularity, int device,
              std::int64_t hits, GpuMeasurement* hit_samples)
{
    const std::vector<std::string> arguments = {
        "--child", "--cache-dir", cache_dir, "--granularity", to_string(granularity),
        "--device", std::to_string(device), "--child-hits", std::to_string(hits)};
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
    };
    ModeResult& cold_entry = measurement.modes[0];
    ModeResult& cold_source = measurement.modes[1];
    ModeResult& warm_cubin = measurement.modes[2];
    ModeResult& warm_ptx = measurement.modes[3];
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
    }
    return measurement;
}

}  // namespace nbits::startup

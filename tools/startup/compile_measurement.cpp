#include "compile_measurement.hpp"

#include "decode_step.hpp"

#include "nbits/error.hpp"
#include "jit/compile.hpp"
#include "jit/include_dirs.hpp"
#include "kernels.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <thread>

namespace nbits::startup {
namespace {

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

}  // namespace

CompileMeasurement measure_compiles(const StartupOptions& options)
{
    const std::vector<std::string> include_dirs = jit::discover_include_dirs();
    if (include_dirs.empty()) {
        throw Error(ErrorKind::MissingHeaders, jit::missing_half_headers_message("nbits-startup --compile-only"));
    }
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
        timed_compile(module_request(tiny, "", {}, CompileGranularity::Source, jit::Target::ptx(8, 0), {})).wall;

    // What a runtime on an H200 compiles cold (PTX), and what nbits-prewarm compiles for it (CUBIN).
    for (const jit::Target& target : {jit::Target::ptx(9, 0), jit::Target::cubin(9, 0)}) {
        TargetCompileTimes times;
        times.target = target;
        for (int r = 0; r < options.repeats; ++r) {
            std::fprintf(stderr, "nbits-startup: %s round %d of %d\n", target.str().c_str(), r + 1, options.repeats);
            Timed entries_total;
            for (std::string_view entry : kDecodeStepEntries) {
                const Timed timed = timed_compile(module_request(kernels::source_of_entry(entry), entry, {},
                                                                 CompileGranularity::Entry, target, include_dirs));
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
                    timed_compile(module_request(*source, "", {}, CompileGranularity::Source, target, include_dirs));
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

}  // namespace nbits::startup

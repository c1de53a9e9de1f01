#pragma once

// nbits-prewarm: what one invocation was asked to do, the images it
// compiles, and the reports of each action.

#include "jit/compile.hpp"
#include "jit/disk_cache.hpp"
#include "jit/kernel_source.hpp"
#include "jit/target.hpp"
#include "nbits/capabilities.hpp"
#include "nbits/options.hpp"
#include "nbits/tensor.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace nbits::prewarm {

// Exit codes of nbits-prewarm.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;  // a compile or store failed, a node could not be planned, damage found
inline constexpr int kExitUsage = 2;

enum class Action { Prewarm, List, Verify, Clear, Help };

// One MatMulNBits node of a model: its shape and attributes. Its plans, on a
// device of each target architecture, under each kernel policy, at each M,
// say which entries and specialisations to compile.
struct NodeSpec {
    enum class Bias { None, Plain, Folded };

    std::int64_t k = 0;
    std::int64_t n = 0;
    std::vector<std::int64_t> m = {1};  // token counts: 1 is a decode step
    std::int64_t bits = 4;
    std::int64_t block_size = 32;
    std::int64_t accuracy_level = 0;
    bool zero_points = false;
    DataType activation = DataType::Float16;
    std::optional<DataType> scales;  // default: the activation's type
    Bias bias = Bias::None;
    bool rmsnorm = false;
    bool gate_up = false;
    std::string origin;  // where it was given: "--shape 4096,6144" or "shapes.txt:3"

    // "K=4096 N=6144 M=1,128 bits=4 block=32 act=f16 zp bias=plain"
    std::string describe() const;
};

struct PrewarmOptions {
    Action action = Action::Prewarm;
    std::vector<jit::Target> targets;  // empty: the local GPUs, else sm_90
    std::vector<std::string> notes;    // how the targets were read, for stderr
    std::string cache_dir;             // empty: where a runtime looks (NBITS_CACHE_DIR, ...)
    std::optional<std::uint64_t> max_bytes;
    int jobs = 0;  // 0: hardware threads
    CompileGranularity granularity = CompileGranularity::Entry;
    std::vector<std::string> sources;  // empty: every embedded source
    std::vector<NodeSpec> nodes;       // empty: every entry of every source, unspecialised
    std::vector<KernelPolicy> policies = {KernelPolicy::Original, KernelPolicy::Fastest};
    bool dry_run = false;
    bool json = false;
    std::string json_out;
};

// Throws tools::UsageError naming the option (or the shapes file and line).
PrewarmOptions parse_options(int argc, char** argv);
std::string help_text();

// One image to compile: an entry (or the whole source) with the -D
// specialisation of a kernel step, for one target.
struct CompileJob {
    const jit::KernelSource* source = nullptr;
    std::string entry;  // empty: the whole source
    jit::Defines defines;
    jit::Target target;

    // "gemv_f16:matmul_nbits_gemv_f16", "gemv_f16" for a whole source, then
    // " -DNBITS_K=4096 ..." for a specialisation.
    std::string label() const;
};

// The devices a node is planned on for one target architecture.
struct TargetDevices {
    jit::Target target;
    std::vector<Capabilities> devices;
};

struct JobPlan {
    std::vector<CompileJob> jobs;
    std::vector<TargetDevices> devices;  // nodes only
    std::vector<std::string> failures;   // a node that could not be planned, and why
};

// The images of every entry of the selected sources for each target, or
// exactly those the nodes' kernel steps use. Jobs are unique, in order.
JobPlan plan_jobs(const PrewarmOptions& options, const std::vector<jit::Target>& targets,
                  const std::vector<Capabilities>& local_devices);

// A CUBIN target (sm_XY) per distinct compute capability among this
// machine's GPUs, with their capabilities; nothing without a driver or GPU.
std::vector<Capabilities> local_devices();

// What an action reports: a human text, the same as JSON, and the exit code.
struct ActionOutput {
    std::string text;
    std::string json;
    int exit_code = kExitOk;
};

// Compiles (or with --dry-run lists) what `options` asks for into `cache`
// (nullptr for a dry run).
ActionOutput prewarm_images(const PrewarmOptions& options, jit::DiskCache* cache);
// --list, --verify and --clear: the cache as it is, without compiling.
ActionOutput list_images(const jit::DiskCache& cache);
ActionOutput verify_images(jit::DiskCache& cache);
ActionOutput clear_images(jit::DiskCache& cache);

std::string human_bytes(std::uint64_t bytes);  // "812 B", "210.4 KiB", "23.4 MiB"
std::string human_age(double seconds);         // "12 s", "3 min", "5 h", "2 d"

}  // namespace nbits::prewarm

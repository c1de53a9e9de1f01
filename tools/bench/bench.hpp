#pragma once

// nbits-bench: what it measures (shapes, sweeps, the path), how (options,
// method), and what it found (rows of results). options.cpp parses and lists,
// device.cpp does the device work that is not the operator (timing, the read
// ceiling, the dense baseline, weights on the device), measure.cpp measures
// the operator (checked runs, timed rows, host overhead, plans), report.cpp
// renders results as a table, JSON, CSV or SVG and reads a saved JSON back.

#include "nbits/matmul_nbits.hpp"
#include "nbits/options.hpp"
#include "nbits/runtime.hpp"
#include "nbits/tensor.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace nbits::bench {

// ---------------------------------------------------------------- shapes ---

// GateUp is the paired node (two K x intermediate weights, SwiGLU output);
// GateUpUnpaired one node of N = 2 x intermediate; Up one unfused gate or up
// projection, N = intermediate (the prefill shape of MEASURED.md).
enum class Projection { Qkv, O, GateUp, GateUpUnpaired, Up, Down, LmHead, Custom };

const char* to_string(Projection projection);
// Throws std::invalid_argument listing the accepted names.
Projection parse_projection(std::string_view name);

struct ModelDims {
    const char* name;
    std::size_t hidden;
    std::size_t intermediate;
    std::size_t qkv;  // fused q, k and v output columns
    std::size_t vocab;
};

const std::vector<ModelDims>& known_models();
// Case-insensitive; throws std::invalid_argument listing the known models.
const ModelDims& find_model(std::string_view name);

// How a row is timed and judged. Decode: CUDA-graph replays over weights
// rotated through DRAM, judged by GB/s against the read ceiling. Prefill:
// eager runs, judged by TFLOP/s.
enum class Regime { Decode, Prefill };
const char* to_string(Regime regime);

// One MatMulNBits node at one M. `n` is the node's N attribute: for the
// paired gate/up node that is the intermediate size, and the node reads two
// K x N weights.
struct BenchShape {
    std::string model;  // a known model's name, or "custom"
    Projection projection = Projection::Custom;
    std::size_t m = 1;
    std::size_t k = 0;
    std::size_t n = 0;
    Regime regime = Regime::Decode;

    bool paired() const { return projection == Projection::GateUp; }
    // Weight columns the node reads: 2N for the paired gate/up node.
    std::size_t weight_columns() const { return paired() ? 2 * n : n; }
    bool decode() const { return regime == Regime::Decode; }
    // "Llama-3-8B gateup"
    std::string label() const;
    // The same node (model, projection, K, N) at any M: rows of one node
    // share their weights on the device.
    bool same_node(const BenchShape& other) const;
};

// M = 1 is decode, any other M prefill.
BenchShape model_shape(const ModelDims& model, Projection projection, std::size_t m);
// `[PROJ:]K,N[,M]`; throws std::invalid_argument.
BenchShape parse_shape(std::string_view spec, std::size_t default_m);

enum class Sweep { None, Decode, Prefill };
const char* to_string(Sweep sweep);

// Decode M = 1 for every model x {qkv, o, gateup, down} and Llama-3-8B
// lm_head, then the prefill rows of MEASURED.md.
std::vector<BenchShape> default_shapes();
std::vector<BenchShape> quick_shapes();
std::vector<Projection> default_projections();
// The nodes of a sweep (M = 1 here) and the M values it runs them at.
std::vector<BenchShape> sweep_nodes(Sweep sweep);
std::vector<std::size_t> sweep_ms(Sweep sweep);
// The decode nodes --host-overhead measures by default.
std::vector<BenchShape> host_overhead_nodes();
// The --list text.
std::string describe_shape_sets();

// --------------------------------------------------------------- options ---

enum class BiasMode { None, Plain, Folded };
const char* to_string(BiasMode mode);
enum class OutputFormat { Table, Json, Csv };

// The MatMulNBits path every row takes: dtypes, quantization layout, fusions.
struct PathConfig {
    DataType activation = DataType::Float16;
    DataType scales = DataType::Float16;
    int bits = 4;
    int block_size = 32;
    bool zero_points = false;
    int accuracy_level = 0;
    BiasMode bias = BiasMode::None;
    bool rmsnorm_prologue = false;
    float rmsnorm_epsilon = 1e-5f;

    // "act=f16 scales=f16 int4 block=32 symmetric accuracy_level=0"
    std::string describe() const;
    // RMS-norm gamma: the activation dtype, Float32 for f32 activations.
    DataType gamma() const { return activation == DataType::Float32 ? DataType::Float32 : activation; }
};

// "f16", "bf16", "f32"; parse throws std::invalid_argument.
const char* short_name(DataType dtype);
DataType parse_float_dtype(std::string_view text);

enum class Mode { Timing, HostOverhead, Plan, FromJson };

// --overrides LABEL:NAME=VALUE[,NAME=VALUE...]: developer overrides (the
// README's NBITS_* variables) under which every row runs again, beside the
// environment's alone, so that one process times the plan and the override
// on the same weights, dense baseline and read ceiling.
struct OverrideSet {
    std::string label;
    std::map<std::string, std::string> variables;

    // "+LABEL: NAME=VALUE,NAME=VALUE beside the environment's overrides"
    std::string describe() const;
};
// Throws std::invalid_argument when the label or a variable is not one nbits
// accepts (a value the operator would ignore is refused here, not ignored).
OverrideSet parse_override_set(std::string_view spec);

// What one row runs under: a policy and the label of an --overrides set
// (empty: the environment's overrides alone).
struct Configuration {
    KernelPolicy policy = KernelPolicy::Original;
    std::string overrides;

    // "fastest", "fastest+sk"
    std::string name() const;
};

struct Method {
    int warmups = 2;
    int decode_repeats = 5;        // timed graph replays per decode row
    int prefill_repeats = 10;      // timed eager runs per prefill row, at most
    int min_prefill_repeats = 3;   // ... and at least, whatever the budget
    double row_budget_ms = 1000;   // device time of one prefill row's timed runs
    std::size_t min_graph_launches = 20;
    std::size_t l2_bytes = 0;
    std::size_t max_weight_bytes = std::size_t{8} << 30;
    int overhead_batch = 200;      // eager calls between two synchronizations
    int overhead_batches = 50;

    std::string describe() const;
};

struct BenchOptions {
    Mode mode = Mode::Timing;
    PathConfig path;
    std::vector<KernelPolicy> policies = {KernelPolicy::Original, KernelPolicy::Fastest};
    std::vector<OverrideSet> override_sets;  // --overrides, in order
    Method method;

    std::vector<std::string> models;
    std::vector<Projection> projections;
    std::vector<std::size_t> ms;
    std::vector<std::string> shape_specs;
    bool quick = false;
    Sweep sweep = Sweep::None;

    std::optional<std::uint64_t> seed;
    int device = 0;
    bool dense = true;
    bool read_floor = false;  // --read-floor

    OutputFormat format = OutputFormat::Table;
    std::string out_path;
    std::string plot_path;
    std::string from_json_path;

    bool help = false;
    bool list = false;

    // Every row the options select, in run order (rows of one node together).
    std::vector<BenchShape> shapes() const;
    // Every policy, under the environment's overrides and then under each
    // --overrides set: what each row runs under, in order.
    std::vector<Configuration> configurations() const;
    // The overrides an operator of `configuration` plans with: unset (the
    // environment's) without a label, else the environment's with the set's.
    std::optional<ops::PlanOverrides> plan_overrides(const Configuration& configuration) const;
};

// Throws tools::UsageError with a message for the user.
BenchOptions parse_options(int argc, char** argv);
std::string help_text();

// --------------------------------------------------------------- results ---

struct Stats {
    double median = 0.0;
    double min = 0.0;
    double max = 0.0;
    std::vector<double> samples;
};
Stats summarize(std::vector<double> samples);

// Microseconds per launch and how they were obtained.
struct Timing {
    Stats us;
    std::string method;          // "graph", "eager batches" or "eager"
    std::size_t launches = 0;    // launches per timed sample
    std::size_t copies = 1;      // weight copies rotated through
};

// The output check against the float64 oracle (the original's bound).
struct Check {
    bool passed = false;
    double max_abs = 0.0;
    double max_rel = 0.0;
    double max_out = 0.0;
    double relative = 0.0;       // the bound's relative factor
    double bound = 0.0;          // max(max_out * relative, 1e-3)
    bool max_rel_limited = true; // max_rel (|error| / max(|expected|, 0.1)) must stay below 5e-2
    std::size_t values = 0;      // sampled values compared with the oracle
    std::size_t non_finite = 0;  // NaN or infinity anywhere in the output

    std::string summary() const;
};

enum class Status { Ok, Failed, Unsupported };
const char* to_string(Status status);

// cuBLASLt dense Y = A·W in the activation dtype for the same M, K and weight
// columns: the peer a user would pick instead.
struct Dense {
    DataType dtype = DataType::Float16;
    std::uint64_t bytes = 0;  // A and W read once, Y written once
    std::optional<Timing> timing;
    std::string note;
    std::string error;
};

struct Row {
    BenchShape shape;
    KernelPolicy policy = KernelPolicy::Original;
    std::string overrides;           // the --overrides label it ran under; empty: none
    Status status = Status::Failed;
    std::string error;
    std::string variant;
    std::string reason;
    std::vector<std::string> steps;  // kernel entries, "cublasLt" for a GEMM step
    bool capture_safe = false;
    std::uint64_t bytes = 0;         // what a perfect kernel moves: every input read once, Y written once
    double flops = 0.0;              // 2·M·K·(weight columns)
    std::optional<Check> check;
    std::optional<Timing> timing;
    std::optional<Dense> dense;      // the same for every policy of one shape and M
    // --read-floor, decode rows: the bench's streaming read of `bytes`, weights
    // rotated and launched alike; the same for every policy of one shape and M.
    std::optional<Timing> read_floor;
    std::vector<std::string> notes;

    Configuration configuration() const { return {policy, overrides}; }
    double us() const { return timing ? timing->us.median : 0.0; }
    double gbps() const;
    double tflops() const;
    // Dense median over this row's median: above 1 the row beats dense.
    std::optional<double> ratio_to_dense() const;
    // The read floor's median over this row's: 100 where the row moves its
    // bytes as fast as a plain streaming read of them.
    std::optional<double> percent_of_read_floor() const;
};

// --host-overhead: host time per eager run() beside bare cuLaunchKernel of
// the same plan steps with the same arguments.
struct OverheadRow {
    BenchShape shape;
    KernelPolicy policy = KernelPolicy::Original;
    std::string overrides;           // as Row's
    Status status = Status::Failed;
    std::string error;
    std::string variant;
    std::vector<std::string> steps;
    std::optional<Check> check;
    std::size_t calls_per_batch = 0;
    std::size_t batches = 0;
    Stats run_us;    // host µs per run() call, one sample per batch
    Stats bare_us;   // host µs per bare launch sequence, one sample per batch
    std::vector<std::string> notes;

    Configuration configuration() const { return {policy, overrides}; }
    double overhead_us() const { return run_us.median - bare_us.median; }
};

// The target for the host overhead of one eager run().
inline constexpr double kOverheadTargetUs = 1.5;

struct DeviceFacts {
    std::string name;
    int compute_major = 0;
    int compute_minor = 0;
    int multiprocessors = 0;
    // The clusters of 2, 3 and 4 CTAs that run at once a CTA an SM, as the runtime counted them for its plans
    // ("66/39/30"; empty where it counted none: no clusters, or a report from before the count).
    std::string clusters;
    std::size_t l2_bytes = 0;
    std::size_t total_memory = 0;
    std::uint32_t memory_bandwidth_gb_per_s = 0;  // the driver's peak (Capabilities); 0: not reported
    int driver_version = 0;   // 13000 for CUDA 13.0
    std::string nvrtc_version;
};

struct ReadCeiling {
    double gbps = 0.0;
    std::size_t bytes = 0;   // read per launch
    Timing timing;
};

struct Report {
    Mode mode = Mode::Timing;   // Timing or HostOverhead
    std::string version;
    DeviceFacts device;
    std::optional<ReadCeiling> ceiling;
    PathConfig path;
    std::vector<KernelPolicy> policies;
    std::vector<OverrideSet> override_sets;
    std::string method;         // how rows were timed, in words
    std::uint64_t seed = 0;
    double wall_seconds = 0.0;
    std::vector<Row> rows;
    std::vector<OverheadRow> overhead;

    int failed() const;
};

// ------------------------------------------------------------ device work ---

DeviceFacts read_device_facts(CudaRuntime& runtime);
std::size_t free_device_memory(CudaRuntime& runtime);

// Enqueues launch number `index` on the runtime's stream (no synchronization).
using Enqueue = std::function<void(std::size_t index)>;

// Captures `launches` enqueues into one graph, replays it `warmups` times,
// then times `repeats` back-to-back replays queued behind a device spin.
// Throws (the stream left out of capture) when the capture fails.
Timing time_graph_replays(CudaRuntime& runtime, const Enqueue& enqueue, std::size_t launches, int warmups,
                          int repeats);
// The same without a graph: each sample is `launches` eager enqueues between
// two events, divided by `launches`.
Timing time_eager_batches(CudaRuntime& runtime, const Enqueue& enqueue, std::size_t launches, int warmups,
                          int repeats);
// Device milliseconds of one enqueue, event-timed after the queue drained.
double time_once_ms(CudaRuntime& runtime, const Enqueue& enqueue);

// Weight copies rotated so that each timed launch reads DRAM, not L2.
struct Rotation {
    std::size_t copies = 1;
    std::size_t launches = 1;      // per timed sample: whole rounds through the copies
    std::size_t working_set = 0;
    bool below_target = false;     // memory capped the copies short of 4 x L2

    std::string shortfall() const;  // empty, or why some launches may hit L2
};

// At least two copies and 4 x L2 bytes of them, within `budget` bytes.
// Throws Error(InvalidArgument) when one copy alone exceeds the budget.
Rotation plan_rotation(std::size_t bytes_per_copy, std::size_t l2_bytes, std::size_t budget,
                       std::size_t min_launches);
// The rotation for `bytes_per_copy` on this device now: the budget is
// --max-weight-gib and three quarters of the free memory.
Rotation rotation_for(CudaRuntime& runtime, const Method& method, std::size_t bytes_per_copy, bool decode);

// One row, timed the way its regime is: decode as graph replays of
// `rotation.launches` launches when `capture_safe` (else, or when the capture
// fails, as eager batches; `note` says so); prefill as single eager runs, as
// many as --row-budget-ms allows between the minimum and --repeats (`note`
// says when the budget capped them). The enqueue picks the weight copy from
// the launch number.
Timing time_row(CudaRuntime& runtime, const Enqueue& enqueue, Regime regime, bool capture_safe,
                const Rotation& rotation, const Method& method, std::string& note);

// Rounds up to the 256-byte alignment every device tensor gets here.
std::size_t aligned(std::size_t bytes);
// Fills [filled, total) of a device buffer by repeating its first `filled` bytes.
void tile_device(CudaRuntime& runtime, CUdeviceptr base, std::size_t filled, std::size_t total);

// Graph-timed streaming reads of a buffer of 1 to 2 GiB.
ReadCeiling measure_read_ceiling(CudaRuntime& runtime, const DeviceFacts& facts, const Method& method);
// The same kernel over `bytes` (rounded up to 16), rotated through copies
// like a decode row's weights and timed in graph replays like it: what a
// launch that only reads that many bytes takes, ramp and tail included.
Timing time_read_floor(CudaRuntime& runtime, const DeviceFacts& facts, std::uint64_t bytes, const Method& method);

// cuBLASLt dense in `dtype` at every M of `ms` for one K x N, weights rotated
// like the operator's; one entry per M, in order. Failures land in `error`.
std::vector<Dense> time_dense(CudaRuntime& runtime, DataType dtype, std::size_t k, std::size_t n,
                              const std::vector<std::size_t>& ms, Regime regime, const Method& method,
                              std::uint64_t seed);

// ------------------------------------------------------------- measuring ---

// Progress goes to stderr, one line per row; the report is returned.
Report run_timing(const std::shared_ptr<CudaRuntime>& runtime, const BenchOptions& options);
Report run_host_overhead(const std::shared_ptr<CudaRuntime>& runtime, const BenchOptions& options);

// --plan: every row's plan under every policy, printed by LaunchPlan's own
// describe() / to_json(), on the local GPU's capabilities or an H200's.
// `failed` counts the rows the planner rejected (Unsupported excluded).
std::string render_plans(const BenchOptions& options, int& failed);

// ---------------------------------------------------------------- report ---

std::string render_report(OutputFormat format, const Report& report);
// Bars of achieved GB/s per decode row against the read ceiling, and of
// TFLOP/s per prefill row (log scale): every policy beside dense.
std::string render_svg(const Report& report);
// A report saved with --json, read back. Throws std::runtime_error.
Report parse_report(const std::string& json);

}  // namespace nbits::bench

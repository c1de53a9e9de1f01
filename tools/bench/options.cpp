// The shapes nbits-bench knows (models, the default and quick sets, the
// sweeps), its options and their --help, and the rows a command line selects.

#include "bench.hpp"

#include "command_line.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace nbits::bench {
namespace {

struct ProjectionName {
    Projection projection;
    const char* name;
};

constexpr ProjectionName kProjectionNames[] = {
    {Projection::Qkv, "qkv"},   {Projection::O, "o"},       {Projection::GateUp, "gateup"},
    {Projection::GateUpUnpaired, "gateup_unpaired"},        {Projection::Up, "up"},
    {Projection::Down, "down"}, {Projection::LmHead, "lm_head"}, {Projection::Custom, "custom"},
};

bool equal_ignoring_case(std::string_view a, std::string_view b)
{
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
               return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
           });
}

constexpr std::int64_t kLargestDimension = std::int64_t{1} << 31;

// The M at which a decode sweep stops: beyond it a node is compute-shaped.
constexpr std::size_t kLargestDecodeM = 16;

}  // namespace

// ---------------------------------------------------------------- shapes ---

const char* to_string(Projection projection)
{
    for (const ProjectionName& entry : kProjectionNames) {
        if (entry.projection == projection) {
            return entry.name;
        }
    }
    return "?";
}

Projection parse_projection(std::string_view name)
{
    for (const ProjectionName& entry : kProjectionNames) {
        if (equal_ignoring_case(name, entry.name) && entry.projection != Projection::Custom) {
            return entry.projection;
        }
    }
    throw std::invalid_argument(
        fmt::format("unknown projection '{}': use qkv, o, gateup, gateup_unpaired, up, down or lm_head", name));
}

const std::vector<ModelDims>& known_models()
{
    static const std::vector<ModelDims> models = {
        {"Qwen2.5-0.5B", 896, 4864, 1152, 151936},
        {"Qwen2.5-7B", 3584, 18944, 4608, 152064},
        {"Llama-3-8B", 4096, 14336, 6144, 128256},
        {"Llama-3-70B", 8192, 28672, 10240, 128256},
        {"Phi-3.5-mini", 3072, 8192, 9216, 32064},
    };
    return models;
}

const ModelDims& find_model(std::string_view name)
{
    std::string known;
    for (const ModelDims& model : known_models()) {
        if (equal_ignoring_case(name, model.name)) {
            return model;
        }
        known += known.empty() ? model.name : std::string(", ") + model.name;
    }
    throw std::invalid_argument(fmt::format("unknown model '{}': known models are {}", name, known));
}

const char* to_string(Regime regime) { return regime == Regime::Decode ? "decode" : "prefill"; }

const char* to_string(Sweep sweep)
{
    switch (sweep) {
    case Sweep::None: return "none";
    case Sweep::Decode: return "decode";
    case Sweep::Prefill: return "prefill";
    }
    return "?";
}

std::string BenchShape::label() const
{
    return projection == Projection::Custom ? std::string("custom") : model + " " + to_string(projection);
}

bool BenchShape::same_node(const BenchShape& other) const
{
    return model == other.model && projection == other.projection && k == other.k && n == other.n;
}

BenchShape model_shape(const ModelDims& model, Projection projection, std::size_t m)
{
    BenchShape shape;
    shape.model = model.name;
    shape.projection = projection;
    shape.m = m;
    shape.regime = m == 1 ? Regime::Decode : Regime::Prefill;
    // The attention output projection maps heads x head_dim back to hidden;
    // for all five models heads x head_dim equals hidden.
    switch (projection) {
    case Projection::Qkv: shape.k = model.hidden, shape.n = model.qkv; break;
    case Projection::O: shape.k = model.hidden, shape.n = model.hidden; break;
    case Projection::GateUp: shape.k = model.hidden, shape.n = model.intermediate; break;
    case Projection::GateUpUnpaired: shape.k = model.hidden, shape.n = 2 * model.intermediate; break;
    case Projection::Up: shape.k = model.hidden, shape.n = model.intermediate; break;
    case Projection::Down: shape.k = model.intermediate, shape.n = model.hidden; break;
    case Projection::LmHead: shape.k = model.hidden, shape.n = model.vocab; break;
    case Projection::Custom: throw std::invalid_argument("a model has no custom projection");
    }
    return shape;
}

BenchShape parse_shape(std::string_view spec, std::size_t default_m)
{
    BenchShape shape;
    shape.model = "custom";
    shape.m = default_m;
    const std::size_t colon = spec.find(':');
    if (colon != std::string_view::npos) {
        shape.projection = parse_projection(spec.substr(0, colon));
        spec.remove_prefix(colon + 1);
    }
    const std::vector<std::string> numbers = tools::split_list(spec);
    if (numbers.size() != 2 && numbers.size() != 3) {
        throw std::invalid_argument(fmt::format("'{}' is not K,N or K,N,M", spec));
    }
    shape.k = static_cast<std::size_t>(tools::parse_integer(numbers[0], 1, kLargestDimension));
    shape.n = static_cast<std::size_t>(tools::parse_integer(numbers[1], 1, kLargestDimension));
    if (numbers.size() == 3) {
        shape.m = static_cast<std::size_t>(tools::parse_integer(numbers[2], 1, kLargestDimension));
    }
    shape.regime = shape.m == 1 ? Regime::Decode : Regime::Prefill;
    return shape;
}

std::vector<Projection> default_projections()
{
    return {Projection::Qkv, Projection::O, Projection::GateUp, Projection::Down};
}

namespace {

std::vector<BenchShape> decode_nodes()
{
    std::vector<BenchShape> shapes;
    for (const ModelDims& model : known_models()) {
        for (const Projection projection : default_projections()) {
            shapes.push_back(model_shape(model, projection, 1));
        }
    }
    shapes.push_back(model_shape(find_model("Llama-3-8B"), Projection::LmHead, 1));
    return shapes;
}

}  // namespace

std::vector<BenchShape> default_shapes()
{
    std::vector<BenchShape> shapes = decode_nodes();
    shapes.push_back(model_shape(find_model("Qwen2.5-7B"), Projection::Qkv, 128));
    shapes.push_back(model_shape(find_model("Qwen2.5-7B"), Projection::Up, 512));
    shapes.push_back(model_shape(find_model("Llama-3-8B"), Projection::Up, 2048));
    return shapes;
}

std::vector<BenchShape> quick_shapes()
{
    return {
        model_shape(find_model("Qwen2.5-0.5B"), Projection::Qkv, 1),
        model_shape(find_model("Qwen2.5-0.5B"), Projection::GateUp, 1),
        model_shape(find_model("Llama-3-8B"), Projection::Down, 1),
        model_shape(find_model("Qwen2.5-7B"), Projection::Qkv, 128),
    };
}

std::vector<BenchShape> sweep_nodes(Sweep sweep)
{
    if (sweep == Sweep::Decode) {
        return decode_nodes();
    }
    if (sweep == Sweep::Prefill) {
        // The prefill shapes of MEASURED.md, and Llama-3-70B's up projection.
        return {model_shape(find_model("Qwen2.5-7B"), Projection::Qkv, 1),
                model_shape(find_model("Qwen2.5-7B"), Projection::Up, 1),
                model_shape(find_model("Llama-3-8B"), Projection::Up, 1),
                model_shape(find_model("Llama-3-70B"), Projection::Up, 1)};
    }
    return {};
}

std::vector<std::size_t> sweep_ms(Sweep sweep)
{
    if (sweep == Sweep::Decode) {
        return {1, 2, 4, 8, 16};
    }
    if (sweep == Sweep::Prefill) {
        return {2, 4, 8, 16, 32, 64, 128, 256, 512, 2048};
    }
    return {};
}

std::vector<BenchShape> host_overhead_nodes()
{
    return {model_shape(find_model("Llama-3-8B"), Projection::Qkv, 1),
            model_shape(find_model("Llama-3-8B"), Projection::Down, 1),
            model_shape(find_model("Qwen2.5-0.5B"), Projection::Qkv, 1)};
}

std::string describe_shape_sets()
{
    std::string text =
        "Models (K x N per projection; gateup is the paired node: N = intermediate, two weights; gateup_unpaired\n"
        "one node of N = 2 x intermediate; up one unfused gate or up projection):\n";
    const Projection all[] = {Projection::Qkv, Projection::O,    Projection::GateUp, Projection::GateUpUnpaired,
                              Projection::Up,  Projection::Down, Projection::LmHead};
    for (const ModelDims& model : known_models()) {
        text += fmt::format("  {}\n", model.name);
        for (const Projection projection : all) {
            const BenchShape shape = model_shape(model, projection, 1);
            text += fmt::format("    {:<16} K={:<6} N={}\n", to_string(projection), shape.k, shape.n);
        }
    }
    const auto list = [&](const std::string& title, const std::vector<BenchShape>& shapes, bool with_m) {
        text += fmt::format("\n{}:\n", title);
        for (const BenchShape& shape : shapes) {
            text += with_m ? fmt::format("  {:<30} M={:<5} K={:<6} N={:<7} {}\n", shape.label(), shape.m, shape.k,
                                         shape.n, to_string(shape.regime))
                           : fmt::format("  {:<30} K={:<6} N={}\n", shape.label(), shape.k, shape.n);
        }
    };
    const auto m_list = [](Sweep sweep) {
        std::string text;
        for (const std::size_t m : sweep_ms(sweep)) {
            text += (text.empty() ? "" : ",") + std::to_string(m);
        }
        return text;
    };
    list("Default set (no arguments)", default_shapes(), true);
    list("Quick set (--quick)", quick_shapes(), true);
    list(fmt::format("Decode sweep (--sweep decode): each node at M = {}, timed as decode", m_list(Sweep::Decode)),
         sweep_nodes(Sweep::Decode), false);
    list(fmt::format("Prefill sweep (--sweep prefill): each node at M = {}, timed as prefill", m_list(Sweep::Prefill)),
         sweep_nodes(Sweep::Prefill), false);
    list("Host overhead (--host-overhead), at M = 1 unless --m is given", host_overhead_nodes(), false);
    return text;
}

// --------------------------------------------------------------- options ---

const char* to_string(BiasMode mode)
{
    switch (mode) {
    case BiasMode::None: return "none";
    case BiasMode::Plain: return "plain";
    case BiasMode::Folded: return "folded";
    }
    return "?";
}

const char* short_name(DataType dtype)
{
    switch (dtype) {
    case DataType::Float16: return "f16";
    case DataType::BFloat16: return "bf16";
    case DataType::Float32: return "f32";
    default: return to_string(dtype);
    }
}

DataType parse_float_dtype(std::string_view text)
{
    if (text == "f16" || text == "fp16") {
        return DataType::Float16;
    }
    if (text == "bf16") {
        return DataType::BFloat16;
    }
    if (text == "f32" || text == "fp32") {
        return DataType::Float32;
    }
    throw std::invalid_argument("use f16, bf16 or f32");
}

std::string PathConfig::describe() const
{
    std::string text =
        fmt::format("act={} scales={} int{} block={} {} accuracy_level={}", short_name(activation),
                    short_name(scales), bits, block_size, zero_points ? "zero-points" : "symmetric", accuracy_level);
    if (bias != BiasMode::None) {
        text += fmt::format(" bias={}", to_string(bias));
    }
    if (rmsnorm_prologue) {
        text += fmt::format(" rmsnorm(eps={:g})", rmsnorm_epsilon);
    }
    return text;
}

std::string OverrideSet::describe() const
{
    std::string assignments;
    for (const auto& [name, value] : variables) {
        assignments += fmt::format("{}{}={}", assignments.empty() ? "" : ",", name, value);
    }
    return fmt::format("+{}: {} beside the environment's overrides", label, assignments);
}

OverrideSet parse_override_set(std::string_view spec)
{
    const std::size_t colon = spec.find(':');
    if (colon == std::string_view::npos) {
        throw std::invalid_argument(fmt::format("'{}' has no label: write LABEL:NAME=VALUE[,NAME=VALUE...], e.g. "
                                                "sk:NBITS_PREFILL_STREAM_K=1",
                                                spec));
    }
    OverrideSet set;
    set.label = std::string(spec.substr(0, colon));
    const bool label_ok =
        !set.label.empty() && set.label.size() <= 32 && std::all_of(set.label.begin(), set.label.end(), [](char c) {
            return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '-' || c == '.';
        });
    if (!label_ok) {
        throw std::invalid_argument(
            fmt::format("label '{}': use 1 to 32 letters, digits, '_', '-' or '.'", set.label));
    }
    for (const std::string& assignment : tools::split_list(spec.substr(colon + 1))) {
        const std::size_t equals = assignment.find('=');
        const std::string name = assignment.substr(0, equals);
        const std::string value = equals == std::string::npos ? "" : assignment.substr(equals + 1);
        if (equals == std::string::npos || name.empty() || value.empty()) {
            throw std::invalid_argument(fmt::format("'{}' in set '{}': write NAME=VALUE", assignment, set.label));
        }
        if (set.variables.count(name) != 0) {
            throw std::invalid_argument(fmt::format("set '{}' names {} twice", set.label, name));
        }
        // The operator ignores a name or value it does not know; a benchmark must not time the plan instead.
        if (!ops::PlanOverrides::parse({{name, value}}).any()) {
            throw std::invalid_argument(fmt::format(
                "{}={} in set '{}' is not a developer override nbits accepts (see the README's environment "
                "variables)",
                name, value, set.label));
        }
        set.variables[name] = value;
    }
    if (set.variables.empty()) {
        throw std::invalid_argument(fmt::format("set '{}' sets nothing: write {}:NAME=VALUE", set.label, set.label));
    }
    return set;
}

std::string Configuration::name() const
{
    return overrides.empty() ? std::string(to_string(policy)) : fmt::format("{}+{}", to_string(policy), overrides);
}

std::string Method::describe() const
{
    return fmt::format(
        "decode rows: median of {} CUDA-graph replays of >= {} launches each (after {} warm-ups), weights rotated "
        "over >= 4 x L2; prefill rows: median of {}..{} eager runs after up to {} warm-ups, capped at {:g} ms of "
        "device time per row; all timed work queued behind a device spin",
        decode_repeats, min_graph_launches, warmups, min_prefill_repeats, prefill_repeats, warmups, row_budget_ms);
}

namespace {

// Switches resolved after parsing, when every option is known.
struct Switches {
    bool scales_given = false;
    bool no_dense = false;
    bool json = false;
    bool csv = false;
    bool plan = false;
    bool host_overhead = false;
};

int parse_count(const std::string& value, std::int64_t minimum, std::int64_t maximum)
{
    return static_cast<int>(tools::parse_integer(value, minimum, maximum));
}

// The parser over `options`; the same table serves parsing and --help.
tools::CommandLine command_line(BenchOptions& options, Switches& switches)
{
    tools::CommandLine cli(
        "nbits-bench [options]",
        "Times com.microsoft::MatMulNBits through the public nbits API on real model shapes, under\n"
        "every --policy, beside cuBLASLt dense of the same dtype measured in the same run: decode rows\n"
        "as CUDA-graph replays with weights rotated through DRAM, prefill rows as eager runs. Each\n"
        "result is checked against the float64 host oracle (the original tests' bound) before it is\n"
        "timed. Decode rows report GB/s and % of the device's read ceiling (measured in the run),\n"
        "prefill rows TFLOP/s; every row its ratio to dense (dense us / row us: above 1 beats dense).\n"
        "With no options: the default set (fp16, int4, block 32, symmetric, both policies).");

    cli.section("Shapes (see --list)");
    cli.flag("list", "print the models, projections, sets and sweeps, then exit", &options.list);
    cli.option("sweep", "decode|prefill",
               "decode: the decode set at M = 1,2,4,8,16; prefill: 3584x4608, 3584x18944,\n"
               "4096x14336, 8192x28672 at M = 2..2048. --m replaces the M list; --model/--proj\n"
               "filter the nodes; --shape replaces them",
               [&](const std::string& value) {
                   if (value == "decode") {
                       options.sweep = Sweep::Decode;
                   } else if (value == "prefill") {
                       options.sweep = Sweep::Prefill;
                   } else {
                       throw std::invalid_argument("use decode or prefill");
                   }
               });
    cli.option("model", "NAME[,NAME]", "models to run (default: all five when --proj or --m is given)",
               [&](const std::string& value) {
                   for (const std::string& name : tools::split_list(value)) {
                       options.models.emplace_back(find_model(name).name);
                   }
               });
    cli.option("proj", "P[,P]", "projections: qkv,o,gateup,gateup_unpaired,up,down,lm_head (default qkv,o,gateup,down)",
               [&](const std::string& value) {
                   for (const std::string& name : tools::split_list(value)) {
                       options.projections.push_back(parse_projection(name));
                   }
               });
    cli.option("m", "M[,M]",
               "rows (tokens): each selected node runs at every M (default 1; a sweep's own list);\n"
               "M = 1 is timed as decode, any other M as prefill, except in --sweep decode",
               [&](const std::string& value) {
                   for (const std::string& item : tools::split_list(value)) {
                       options.ms.push_back(static_cast<std::size_t>(tools::parse_integer(item, 1, 1 << 20)));
                   }
                   if (options.ms.empty()) {
                       throw std::invalid_argument("no M given");
                   }
               });
    cli.option("shape", "[PROJ:]K,N[,M]",
               "a custom node, repeatable (4096,14336 or 4096,14336,512); prefix gateup: for the\n"
               "paired gate/up node with N = intermediate",
               [&](const std::string& value) { options.shape_specs.push_back(value); });
    cli.flag("quick", "a handful of shapes for a smoke run", &options.quick);

    cli.section("Path (applies to every row)");
    cli.option("act", "f16|bf16|f32",
               "activation dtype (default f16); bf16: bf16 activations, scales, bias, gamma and output,\n"
               "and the dense baseline in bf16",
               [&](const std::string& value) { options.path.activation = parse_float_dtype(value); });
    cli.option("scales", "f16|bf16|f32", "scales dtype (default: the activation dtype)", [&](const std::string& value) {
        options.path.scales = parse_float_dtype(value);
        switches.scales_given = true;
    });
    cli.option("bits", "4|8", "weight bits (default 4)", [&](const std::string& value) {
        options.path.bits = parse_count(value, 4, 8);
        if (options.path.bits != 4 && options.path.bits != 8) {
            throw std::invalid_argument("use 4 or 8");
        }
    });
    cli.option("block-size", "B", "quantization block size, a power of two >= 16 (default 32)",
               [&](const std::string& value) {
                   const int block = parse_count(value, 16, 1 << 16);
                   if ((block & (block - 1)) != 0) {
                       throw std::invalid_argument("not a power of two");
                   }
                   options.path.block_size = block;
               });
    cli.flag("zp", "asymmetric weights: zero points as an input (default symmetric)", &options.path.zero_points);
    cli.option("accuracy-level", "L", "the accuracy_level attribute, 0..4 (default 0)",
               [&](const std::string& value) { options.path.accuracy_level = parse_count(value, 0, 4); });
    cli.option("bias", "none|plain|folded",
               "bias input [N]; folded marks it as a folded Add (default none); the paired\n"
               "gate/up node has no bias slot and runs without one",
               [&](const std::string& value) {
                   if (value == "none") {
                       options.path.bias = BiasMode::None;
                   } else if (value == "plain") {
                       options.path.bias = BiasMode::Plain;
                   } else if (value == "folded") {
                       options.path.bias = BiasMode::Folded;
                   } else {
                       throw std::invalid_argument("use none, plain or folded");
                   }
               });
    cli.flag("rmsnorm", "fused RMS-norm prologue (marker attributes + gamma input)", &options.path.rmsnorm_prologue);
    cli.option("rmsnorm-epsilon", "E", "epsilon of the RMS-norm prologue (default 1e-5)", [&](const std::string& value) {
        options.path.rmsnorm_epsilon = static_cast<float>(tools::parse_number(value));
    });
    cli.option("policy", "P[,P]", "kernel policies, side by side: original, fastest (default original,fastest)",
               [&](const std::string& value) {
                   options.policies.clear();
                   for (const std::string& name : tools::split_list(value)) {
                       const std::optional<KernelPolicy> policy = parse_kernel_policy(name);
                       if (!policy) {
                           throw std::invalid_argument(fmt::format("unknown policy '{}': use original or fastest", name));
                       }
                       if (std::find(options.policies.begin(), options.policies.end(), *policy) ==
                           options.policies.end()) {
                           options.policies.push_back(*policy);
                       }
                   }
                   if (options.policies.empty()) {
                       throw std::invalid_argument("no policy given");
                   }
               });

    cli.option("overrides", "LABEL:NAME=VALUE[,...]",
               "developer overrides (NBITS_* variables, see the README) under which every row runs\n"
               "again, labelled policy+LABEL, beside the environment's alone; repeatable",
               [&](const std::string& value) {
                   OverrideSet set = parse_override_set(value);
                   for (const OverrideSet& other : options.override_sets) {
                       if (other.label == set.label) {
                           throw std::invalid_argument(fmt::format("label '{}' given twice", set.label));
                       }
                   }
                   options.override_sets.push_back(std::move(set));
               });

    Method& method = options.method;
    cli.section("Method");
    cli.option("repeats", "R", "timed graph replays per decode row (default 5) and most eager runs per prefill row\n"
               "(default 10)",
               [&](const std::string& value) {
                   method.decode_repeats = parse_count(value, 1, 100000);
                   method.prefill_repeats = method.decode_repeats;
                   method.min_prefill_repeats = std::min(method.min_prefill_repeats, method.prefill_repeats);
               });
    cli.option("warmup", "W", "untimed replays or runs before timing (default 2)",
               [&](const std::string& value) { method.warmups = parse_count(value, 0, 100000); });
    cli.option("launches", "L", "least launches captured into one decode graph (default 20)",
               [&](const std::string& value) {
                   method.min_graph_launches = static_cast<std::size_t>(parse_count(value, 1, 100000));
               });
    cli.option("row-budget-ms", "MS",
               "device time one prefill row's timed runs may take; slow rows get fewer runs,\n"
               "never fewer than 3 (default 1000)",
               [&](const std::string& value) {
                   method.row_budget_ms = tools::parse_number(value);
                   if (!(method.row_budget_ms > 0.0)) {
                       throw std::invalid_argument("needs a positive number of milliseconds");
                   }
               });
    cli.option("max-weight-gib", "G", "device memory for one node's rotated weight copies (default 8)",
               [&](const std::string& value) {
                   method.max_weight_bytes = static_cast<std::size_t>(parse_count(value, 1, 1024)) << 30;
               });
    cli.option("seed", "S", "random data seed (default: fresh each run, printed in the report)",
               [&](const std::string& value) {
                   options.seed = static_cast<std::uint64_t>(tools::parse_integer(value, 0));
               });
    cli.option("device", "D", "CUDA device ordinal (default 0)",
               [&](const std::string& value) { options.device = parse_count(value, 0, 64); });
    cli.flag("no-dense", "skip the cuBLASLt dense baseline", &switches.no_dense);
    cli.flag("read-floor",
             "also time the read ceiling's streaming read over each decode row's bytes, rotated and graph-replayed "
             "like the row: %floor says how close the row comes to a launch that only reads",
             &options.read_floor);

    cli.section("Host overhead");
    cli.flag("host-overhead",
             "host time per eager run() beside bare cuLaunchKernel of the same plan steps, per\n"
             "decode node (default: Llama-3-8B qkv and down, Qwen2.5-0.5B qkv) and policy",
             &switches.host_overhead);
    cli.option("overhead-batch", "C", "calls per batch, between two synchronizations (default 200)",
               [&](const std::string& value) { method.overhead_batch = parse_count(value, 1, 100000); });
    cli.option("overhead-batches", "B", "timed batches; the median batch is reported (default 50)",
               [&](const std::string& value) { method.overhead_batches = parse_count(value, 1, 100000); });

    cli.section("Output");
    cli.flag("plan",
             "print each row's launch plan under each policy, without timing (no GPU needed:\n"
             "an H200 is assumed without one)",
             &switches.plan);
    cli.option("format", "table|json|csv", "result format on stdout (default table)", [&](const std::string& value) {
        if (value == "table") {
            options.format = OutputFormat::Table;
        } else if (value == "json") {
            options.format = OutputFormat::Json;
        } else if (value == "csv") {
            options.format = OutputFormat::Csv;
        } else {
            throw std::invalid_argument("use table, json or csv");
        }
    });
    cli.flag("json", "same as --format json", &switches.json);
    cli.flag("csv", "same as --format csv", &switches.csv);
    cli.option("out", "FILE", "also write the result (in the chosen format) to FILE",
               [&](const std::string& value) { options.out_path = value; });
    cli.option("plot", "FILE",
               "write an SVG: GB/s per decode row against the read ceiling, TFLOP/s per prefill\n"
               "row, every policy beside dense (and the read floor, with --read-floor)",
               [&](const std::string& value) { options.plot_path = value; });
    cli.option("from-json", "FILE",
               "render a report saved with --json again (table, --csv, --json, --plot); no GPU",
               [&](const std::string& value) { options.from_json_path = value; });
    cli.flag("help", "this text", &options.help);
    return cli;
}

void reject_together(bool a, const char* a_name, bool b, const char* b_name)
{
    if (a && b) {
        throw tools::UsageError(fmt::format("{} and {} exclude each other", a_name, b_name));
    }
}

}  // namespace

std::vector<BenchShape> BenchOptions::shapes() const
{
    if (quick) {
        return quick_shapes();
    }
    const auto selected_by_filter = [&](const BenchShape& node) {
        const bool model_ok = models.empty() || std::find(models.begin(), models.end(), node.model) != models.end();
        const bool projection_ok = projections.empty() || std::find(projections.begin(), projections.end(),
                                                                    node.projection) != projections.end();
        return model_ok && projection_ok;
    };
    const auto at_every_m = [](const std::vector<BenchShape>& nodes, const std::vector<std::size_t>& m_list,
                               std::optional<Regime> regime) {
        std::vector<BenchShape> rows;
        for (const BenchShape& node : nodes) {
            for (const std::size_t m : m_list) {
                BenchShape row = node;
                row.m = m;
                row.regime = regime ? *regime : (m == 1 ? Regime::Decode : Regime::Prefill);
                rows.push_back(row);
            }
        }
        return rows;
    };

    if (sweep != Sweep::None) {
        std::vector<BenchShape> nodes;
        if (!shape_specs.empty()) {
            for (const std::string& spec : shape_specs) {
                nodes.push_back(parse_shape(spec, 1));
            }
        } else {
            for (const BenchShape& node : sweep_nodes(sweep)) {
                if (selected_by_filter(node)) {
                    nodes.push_back(node);
                }
            }
        }
        const Regime regime = sweep == Sweep::Decode ? Regime::Decode : Regime::Prefill;
        return at_every_m(nodes, ms.empty() ? sweep_ms(sweep) : ms, regime);
    }

    const std::vector<std::size_t> m_list = ms.empty() ? std::vector<std::size_t>{1} : ms;
    // --m alone selects every model's default projections, except for
    // --host-overhead, whose own nodes it moves to those M.
    const bool overhead = mode == Mode::HostOverhead;
    const bool selection =
        !models.empty() || !projections.empty() || (!ms.empty() && shape_specs.empty() && !overhead);
    std::vector<BenchShape> rows;
    if (overhead && !selection && shape_specs.empty()) {
        return at_every_m(host_overhead_nodes(), m_list, std::nullopt);
    }
    if (!selection && shape_specs.empty()) {
        return default_shapes();
    }
    if (selection) {
        const std::vector<Projection> chosen = projections.empty() ? default_projections() : projections;
        std::vector<std::string> names = models;
        if (names.empty()) {
            for (const ModelDims& model : known_models()) {
                names.emplace_back(model.name);
            }
        }
        std::vector<BenchShape> nodes;
        for (const std::string& name : names) {
            for (const Projection projection : chosen) {
                nodes.push_back(model_shape(find_model(name), projection, 1));
            }
        }
        rows = at_every_m(nodes, m_list, std::nullopt);
    }
    for (const std::string& spec : shape_specs) {
        // M 0 stands for "not given": a given M is at least 1.
        const BenchShape node = parse_shape(spec, 0);
        const std::vector<BenchShape> spec_rows =
            at_every_m({node}, node.m != 0 ? std::vector<std::size_t>{node.m} : m_list, std::nullopt);
        rows.insert(rows.end(), spec_rows.begin(), spec_rows.end());
    }
    return rows;
}

std::vector<Configuration> BenchOptions::configurations() const
{
    std::vector<Configuration> out;
    for (const KernelPolicy policy : policies) {
        out.push_back({policy, ""});
        for (const OverrideSet& set : override_sets) {
            out.push_back({policy, set.label});
        }
    }
    return out;
}

std::optional<ops::PlanOverrides> BenchOptions::plan_overrides(const Configuration& configuration) const
{
    if (configuration.overrides.empty()) {
        return std::nullopt;
    }
    const auto set = std::find_if(override_sets.begin(), override_sets.end(),
                                  [&](const OverrideSet& s) { return s.label == configuration.overrides; });
    if (set == override_sets.end()) {
        throw std::logic_error("no --overrides set labelled " + configuration.overrides);
    }
    ops::PlanOverrides overrides = ops::PlanOverrides::from_environment();
    overrides.merge(ops::PlanOverrides::parse(set->variables));
    return overrides;
}

BenchOptions parse_options(int argc, char** argv)
{
    BenchOptions options;
    Switches switches;
    command_line(options, switches).parse(argc, argv);
    if (options.help || options.list) {
        return options;
    }
    reject_together(switches.json, "--json", switches.csv, "--csv");
    if (switches.json) {
        options.format = OutputFormat::Json;
    } else if (switches.csv) {
        options.format = OutputFormat::Csv;
    }
    options.dense = !switches.no_dense;
    if (!switches.scales_given) {
        options.path.scales = options.path.activation;
    }

    const bool from_json = !options.from_json_path.empty();
    reject_together(switches.plan, "--plan", switches.host_overhead, "--host-overhead");
    reject_together(from_json, "--from-json", switches.plan, "--plan");
    reject_together(from_json, "--from-json", switches.host_overhead, "--host-overhead");
    if (from_json && (options.sweep != Sweep::None || options.quick || !options.models.empty() ||
                      !options.projections.empty() || !options.ms.empty() || !options.shape_specs.empty())) {
        throw tools::UsageError("--from-json renders a saved report; drop the shape options");
    }
    if (from_json && !options.override_sets.empty()) {
        throw tools::UsageError("--from-json renders a saved report; drop --overrides");
    }
    options.mode = from_json                ? Mode::FromJson
                   : switches.plan          ? Mode::Plan
                   : switches.host_overhead ? Mode::HostOverhead
                                            : Mode::Timing;
    reject_together(switches.host_overhead, "--host-overhead", options.sweep != Sweep::None, "--sweep");
    reject_together(switches.host_overhead, "--host-overhead", !options.plot_path.empty(), "--plot");
    reject_together(switches.plan, "--plan", !options.plot_path.empty(), "--plot");
    if (switches.plan && options.format == OutputFormat::Csv) {
        throw tools::UsageError("--plan prints plans as text or --json (LaunchPlan::describe and to_json), not CSV");
    }
    if (options.quick && (options.sweep != Sweep::None || !options.models.empty() || !options.projections.empty() ||
                          !options.shape_specs.empty() || !options.ms.empty())) {
        throw tools::UsageError("--quick runs its own shapes; drop --sweep, --model, --proj, --m and --shape");
    }
    if (options.sweep != Sweep::None && !options.shape_specs.empty() &&
        (!options.models.empty() || !options.projections.empty())) {
        throw tools::UsageError("with --sweep, --shape replaces the sweep's nodes; drop --model and --proj");
    }
    if (options.method.min_prefill_repeats > options.method.prefill_repeats) {
        options.method.min_prefill_repeats = options.method.prefill_repeats;
    }
    if (from_json) {
        return options;
    }
    // Parse the shapes now, so that a bad one is a usage error, not a late failure.
    try {
        if (options.shapes().empty()) {
            throw tools::UsageError(
                options.sweep != Sweep::None
                    ? fmt::format("the options select none of the {} sweep's nodes (see --list); for other nodes in "
                                  "the sweep, name them with --shape (e.g. --shape up:4096,14336)",
                                  to_string(options.sweep))
                    : std::string("the options select no shapes (see --list)"));
        }
    } catch (const std::invalid_argument& error) {
        throw tools::UsageError(std::string("--shape: ") + error.what());
    }
    return options;
}

std::string help_text()
{
    BenchOptions options;
    Switches switches;
    return command_line(options, switches).help() + R"(
Examples:
  nbits-bench --sweep decode --policy original,fastest --plot decode.svg
  nbits-bench --sweep prefill --act bf16 --csv --out prefill.csv
  nbits-bench --host-overhead
  nbits-bench --from-json run.json --plot run.svg

Exit status:
  0  every row ran (or was unsupported by its policy) and passed its check;
     --list, --help, and --from-json once rendered
  1  a row failed: its output check, an operator error, a timing error, or
     with --host-overhead bare launches that wrote other bytes than run()
     and failed the check; with --plan, a node the planner rejected (other
     than unsupported)
  2  bad usage
  3  no usable GPU (--plan, --list, --help and --from-json need none)
  4  the run itself failed: runtime creation, reading --from-json, writing
     --out or --plot
)";
}

}  // namespace nbits::bench

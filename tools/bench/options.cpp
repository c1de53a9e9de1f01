#include "options.hpp"

#include "command_line.hpp"

#include <fmt/format.h>

#include <stdexcept>

namespace nbits::bench {
namespace {

DataType parse_float_dtype(const std::string& value)
{
    if (value == "f16" || value == "fp16") {
        return DataType::Float16;
    }
    if (value == "f32" || value == "fp32") {
        return DataType::Float32;
    }
    throw std::invalid_argument("use f16 or f32");
}

const char* short_name(DataType dtype) { return dtype == DataType::Float16 ? "f16" : "f32"; }

// Switches whose meaning depends on the other options, resolved after parsing.
struct Switches {
    bool scales_given = false;
    bool no_cublas = false;
    bool json = false;
    bool csv = false;
};

// Builds the parser over `options`; the same table serves parsing and --help.
tools::CommandLine command_line(BenchOptions& options, Switches& switches)
{
    tools::CommandLine cli(
        "nbits-bench [options]",
        "Times com.microsoft::MatMulNBits through the public nbits API on real model shapes:\n"
        "decode (M=1) as CUDA-graph replays with weights rotated through DRAM, prefill (M>1) as\n"
        "event-timed eager runs; each result is checked against a float64 host reference first,\n"
        "and set against the device's measured read ceiling and cuBLASLt fp16 dense.\n"
        "With no options: the default set of shared/docs/MEASURED.md (fp16, int4, block 32, symmetric).");

    cli.section("Shapes");
    cli.flag("list", "print the built-in models, projections and sets, then exit", &options.list);
    cli.option("model", "NAME[,NAME]", "models to run (see --list); default: all five when --proj or --m is given",
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
    cli.option("m", "M", "rows (tokens) for the --model/--proj selection and for --shape without M (default 1)",
               [&](const std::string& value) {
                   options.m = static_cast<std::size_t>(tools::parse_integer(value, 1, std::int64_t{1} << 20));
               });
    cli.option("shape", "[PROJ:]K,N[,M]",
               "a custom node, repeatable (4096,14336 or 4096,14336,512); prefix gateup: for the\n"
               "paired gate/up node with N = intermediate",
               [&](const std::string& value) { options.shape_specs.push_back(value); });
    cli.flag("quick", "a handful of shapes for a smoke run", &options.quick);

    cli.section("Path (applies to every shape)");
    cli.option("act", "f16|f32", "activation dtype (default f16)",
               [&](const std::string& value) { options.path.activation = parse_float_dtype(value); });
    cli.option("scales", "f16|f32", "scales dtype (default: the activation dtype; f32 activations need f32)",
               [&](const std::string& value) {
                   options.path.scales = parse_float_dtype(value);
                   switches.scales_given = true;
               });
    cli.option("bits", "4|8", "weight bits (default 4)", [&](const std::string& value) {
        options.path.bits = static_cast<int>(tools::parse_integer(value, 4, 8));
        if (options.path.bits != 4 && options.path.bits != 8) {
            throw std::invalid_argument("use 4 or 8");
        }
    });
    cli.option("block-size", "B", "quantization block size, a power of two >= 16 (default 32)",
               [&](const std::string& value) {
                   const std::int64_t block = tools::parse_integer(value, 16, 1 << 16);
                   if ((block & (block - 1)) != 0) {
                       throw std::invalid_argument("not a power of two");
                   }
                   options.path.block_size = static_cast<int>(block);
               });
    cli.flag("zp", "asymmetric weights: random zero points as an input (default symmetric)",
             &options.path.zero_points);
    cli.option("accuracy-level", "L", "the accuracy_level attribute, 0..4 (default 0)", [&](const std::string& value) {
        options.path.accuracy_level = static_cast<int>(tools::parse_integer(value, 0, 4));
    });
    cli.option("bias", "none|plain|folded", "bias input [N]; folded marks it as a folded Add (default none);\n"
               "the paired gate/up node has no bias slot and runs without one",
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
    cli.option("rmsnorm-epsilon", "E", "epsilon of the RMS-norm prologue (default 1e-5)",
               [&](const std::string& value) { options.path.rmsnorm_epsilon = static_cast<float>(tools::parse_number(value)); });

    cli.section("Method");
    cli.option("repeats", "R", "timed graph replays (decode, default 5) and timed runs (prefill, default 10)",
               [&](const std::string& value) { options.repeats = static_cast<int>(tools::parse_integer(value, 1, 100000)); });
    cli.option("warmup", "W", "untimed replays or runs before timing (default 2)",
               [&](const std::string& value) { options.warmups = static_cast<int>(tools::parse_integer(value, 0, 100000)); });
    cli.option("launches", "L", "least launches captured into one decode graph (default 20)",
               [&](const std::string& value) {
                   options.min_graph_launches = static_cast<int>(tools::parse_integer(value, 1, 100000));
               });
    cli.option("max-weight-gib", "G", "device memory for one shape's rotated weight copies (default 8)",
               [&](const std::string& value) {
                   options.max_weight_bytes = static_cast<std::size_t>(tools::parse_integer(value, 1, 1024)) << 30;
               });
    cli.option("seed", "S", "random data seed (default: fresh each run, printed in the report)",
               [&](const std::string& value) {
                   options.seed = static_cast<std::uint64_t>(tools::parse_integer(value, 0));
               });
    cli.option("device", "D", "CUDA device ordinal (default 0)",
               [&](const std::string& value) { options.device = static_cast<int>(tools::parse_integer(value, 0, 64)); });
    cli.flag("no-cublas", "skip the cuBLASLt fp16 dense baseline", &switches.no_cublas);

    cli.section("Output");
    cli.flag("plan", "print each shape's chosen variant and steps without timing (no GPU needed: H200 assumed)",
             &options.plan_only);
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
    cli.flag("help", "this text", &options.help);
    return cli;
}

}  // namespace

const char* to_string(BiasMode mode)
{
    switch (mode) {
        case BiasMode::None: return "none";
        case BiasMode::Plain: return "plain";
        case BiasMode::Folded: return "folded";
    }
    return "?";
}

std::string PathConfig::describe() const
{
    std::string text = fmt::format("act={} scales={} int{} block={} {} accuracy_level={}", short_name(activation),
                                   short_name(scales), bits, block_size, zero_points ? "zero-points" : "symmetric",
                                   accuracy_level);
    if (bias != BiasMode::None) {
        text += fmt::format(" bias={}", to_string(bias));
    }
    if (rmsnorm_prologue) {
        text += fmt::format(" rmsnorm(eps={:g})", rmsnorm_epsilon);
    }
    return text;
}

std::vector<BenchShape> BenchOptions::shapes() const
{
    if (quick) {
        return quick_shapes();
    }
    const bool selected = !models.empty() || !projections.empty() || (m.has_value() && shape_specs.empty());
    if (!selected && shape_specs.empty()) {
        return default_shapes();
    }
    std::vector<BenchShape> result;
    if (selected) {
        const std::vector<Projection> chosen = projections.empty() ? default_projections() : projections;
        std::vector<std::string> names = models;
        if (names.empty()) {
            for (const ModelDims& model : known_models()) {
                names.emplace_back(model.name);
            }
        }
        for (const std::string& name : names) {
            for (Projection projection : chosen) {
                result.push_back(model_shape(find_model(name), projection, m.value_or(1)));
            }
        }
    }
    for (const std::string& spec : shape_specs) {
        result.push_back(parse_shape(spec, m.value_or(1)));
    }
    return result;
}

BenchOptions parse_options(int argc, char** argv)
{
    BenchOptions options;
    Switches switches;
    command_line(options, switches).parse(argc, argv);
    if (switches.json && switches.csv) {
        throw tools::UsageError("--json and --csv exclude each other");
    }
    if (switches.json) {
        options.format = OutputFormat::Json;
    } else if (switches.csv) {
        options.format = OutputFormat::Csv;
    }
    options.cublas = !switches.no_cublas;
    if (!switches.scales_given) {
        options.path.scales = options.path.activation;
    }
    if (options.quick && (!options.models.empty() || !options.projections.empty() || !options.shape_specs.empty())) {
        throw tools::UsageError("--quick runs its own shapes; drop --model, --proj and --shape");
    }
    // Parse the custom shapes now, so that a bad one is a usage error, not a late failure.
    try {
        (void)options.shapes();
    } catch (const std::invalid_argument& error) {
        throw tools::UsageError(std::string("--shape: ") + error.what());
    }
    return options;
}

std::string help_text()
{
    BenchOptions options;
    Switches switches;
    return command_line(options, switches).help();
}

}  // namespace nbits::bench

// nbits-plan: prints the launch plan MatMulNBits would execute for a node's
// attributes and input shapes on a named device, under a kernel policy,
// without a GPU. The plan is printed by LaunchPlan::describe() / to_json().
//
// Exit status: 0 the plan was printed; 1 the node's attributes or tensors
// were rejected (the operator's own message); 2 bad usage.

#include "command_line.hpp"

#include "nbits/error.hpp"
#include "nbits/matmul_nbits.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

using namespace nbits;
using namespace nbits::ops;

namespace {

constexpr int kExitRejected = 1;
constexpr int kExitUsage = 2;

struct NamedDevice {
    const char* name;
    Capabilities (*capabilities)();
};

constexpr NamedDevice kDevices[] = {
    {"h200", Capabilities::h200},       {"h100", Capabilities::h100},       {"h100-pcie", Capabilities::h100_pcie},
    {"h20", Capabilities::h20},         {"rtx4090", Capabilities::rtx4090}, {"l4", Capabilities::l4},
    {"sm89-46", Capabilities::sm89_46}, {"sm86-28", Capabilities::sm86_28}, {"a100", Capabilities::a100},
    {"rtx5090", Capabilities::rtx5090},
};

std::string device_names()
{
    std::string names;
    for (const NamedDevice& device : kDevices) {
        names += (names.empty() ? "" : "|") + std::string(device.name);
    }
    return names;
}

DataType float_type(const std::string& name)
{
    if (name == "f16") {
        return DataType::Float16;
    }
    if (name == "bf16") {
        return DataType::BFloat16;
    }
    if (name == "f32") {
        return DataType::Float32;
    }
    throw std::invalid_argument("use f16, bf16 or f32");
}

struct PlanOptions {
    std::optional<std::int64_t> k;
    std::optional<std::int64_t> n;
    std::int64_t bits = 4;
    std::int64_t block_size = 32;
    std::int64_t accuracy_level = 0;
    bool folded_bias = false;
    bool gate_up = false;
    std::optional<DataType> gamma;
    std::optional<float> epsilon;

    std::int64_t m = 1;
    DataType activation = DataType::Float16;
    std::optional<DataType> scales;
    bool zero_points = false;
    bool bias = false;
    bool g_idx = false;

    std::string device = "h200";
    KernelPolicy policy = KernelPolicy::Original;
    std::optional<std::string> down_columns;
    std::optional<std::string> accuracy4_warps;
    std::optional<std::string> prefill_split_k;
    std::optional<std::string> prefill_wgmma_tile_n;
    std::optional<std::string> prefill_wgmma_min_m;
    std::optional<std::string> prefill_wgmma_tile_m;
    std::optional<std::string> prefill_producer_warps;
    std::optional<std::string> prefill_tma;
    std::optional<std::string> prefill_tail_split;
    std::optional<std::string> prefill_wide_split;
    std::optional<std::string> prefill_stream_k;
    std::optional<std::string> prefill_programmatic;
    std::optional<std::string> prefill_register_handback;
    std::optional<std::string> decode_programmatic;
    std::optional<std::string> decode_stages;
    std::optional<std::string> decode_tiles;
    std::optional<std::string> decode_stage_acts;
    std::optional<std::string> decode_col_warps;
    std::optional<std::string> prefill_chunk_columns;
    std::optional<std::string> decode_cluster_k;
    std::optional<std::string> decode_chunks;
    std::optional<std::string> decode_stage_meta;
    std::optional<std::string> decode_prefetch;
    std::optional<std::string> decode_early_acts;
    std::optional<std::string> decode_offset_codes;

    bool json = false;
    bool help = false;
};

// The developer overrides, each a flag named after its environment variable.
struct OverrideFlag {
    const char* flag;
    const char* values;
    const char* environment;
    std::optional<std::string> PlanOptions::*field;
};
constexpr OverrideFlag kOverrideFlags[] = {
    {"down-cols", "8|4|2", kDownColumnsEnv, &PlanOptions::down_columns},
    {"acc4-warps", "1|2|4|8", kAccuracy4WarpsEnv, &PlanOptions::accuracy4_warps},
    {"prefill-split-k", "1..8", kPrefillSplitKEnv, &PlanOptions::prefill_split_k},
    {"prefill-wgmma-tile-n", "128|256", kPrefillWgmmaTileNEnv, &PlanOptions::prefill_wgmma_tile_n},
    {"prefill-wgmma-min-m", "17..65", kPrefillWgmmaMinMEnv, &PlanOptions::prefill_wgmma_min_m},
    {"prefill-wgmma-tile-m", "64|128|256", kPrefillWgmmaTileMEnv, &PlanOptions::prefill_wgmma_tile_m},
    {"prefill-producer-warps", "0|1|2|4", kPrefillProducerWarpsEnv, &PlanOptions::prefill_producer_warps},
    {"prefill-tma", "0|1", kPrefillTmaEnv, &PlanOptions::prefill_tma},
    {"prefill-tail-split", "0|1", kPrefillTailSplitEnv, &PlanOptions::prefill_tail_split},
    {"prefill-wide-split", "0|1", kPrefillWideSplitEnv, &PlanOptions::prefill_wide_split},
    {"prefill-stream-k", "0|1", kPrefillStreamKEnv, &PlanOptions::prefill_stream_k},
    {"prefill-pdl", "0|1", kPrefillProgrammaticEnv, &PlanOptions::prefill_programmatic},
    {"prefill-register-handback", "0|1", kPrefillRegisterHandbackEnv, &PlanOptions::prefill_register_handback},
    {"decode-pdl", "0|1", kDecodeProgrammaticEnv, &PlanOptions::decode_programmatic},
    {"decode-stages", "2..4", kDecodeStagesEnv, &PlanOptions::decode_stages},
    {"decode-tiles", "1|2", kDecodeTilesEnv, &PlanOptions::decode_tiles},
    {"decode-stage-acts", "0|1", kDecodeStageActsEnv, &PlanOptions::decode_stage_acts},
    {"decode-col-warps", "1|2|4", kDecodeColWarpsEnv, &PlanOptions::decode_col_warps},
    {"prefill-chunk-columns", "64..1048576", kPrefillChunkColumnsEnv, &PlanOptions::prefill_chunk_columns},
    {"decode-cluster-k", "1|2|4", kDecodeClusterKEnv, &PlanOptions::decode_cluster_k},
    {"decode-chunks", "1|2", kDecodeChunksEnv, &PlanOptions::decode_chunks},
    {"decode-stage-meta", "0|1", kDecodeStageMetaEnv, &PlanOptions::decode_stage_meta},
    {"decode-prefetch", "0|1", kDecodePrefetchEnv, &PlanOptions::decode_prefetch},
    {"decode-early-acts", "0|1", kDecodeEarlyActsEnv, &PlanOptions::decode_early_acts},
    {"decode-offset-codes", "0|1|2", kDecodeOffsetCodesEnv, &PlanOptions::decode_offset_codes},
};

tools::CommandLine command_line(PlanOptions& o)
{
    tools::CommandLine cli("nbits-plan --K <k> --N <n> [options]",
                           "Prints the launch plan of com.microsoft::MatMulNBits: policy, variant, reason, kernel\n"
                           "entries, grids, blocks, shared memory, arguments and scratch. Needs no GPU.");
    const auto integer = [](std::int64_t* target, std::int64_t minimum) {
        return [target, minimum](const std::string& value) { *target = tools::parse_integer(value, minimum); };
    };
    cli.section("Node");
    cli.option("K", "k", "the node's K (required)", [&](const std::string& value) { o.k = tools::parse_integer(value); });
    cli.option("N", "n", "the node's N (required)", [&](const std::string& value) { o.n = tools::parse_integer(value); });
    cli.option("bits", "4|8", "weight bits (default 4)", integer(&o.bits, 0));
    cli.option("block-size", "b", "quantization block size (default 32)", integer(&o.block_size, 0));
    cli.option("accuracy-level", "l", "the accuracy_level attribute (default 0)", integer(&o.accuracy_level, 0));
    cli.flag("folded-bias", "mark _cuda_matmul_nbits_folded_bias", &o.folded_bias);
    cli.flag("gate-up", "mark _cuda_gate_up_swiglu (the paired gate/up node)", &o.gate_up);
    cli.option("gamma", "f16|bf16|f32", "mark the RMS-norm prologue and add its weight in this dtype",
               [&](const std::string& value) { o.gamma = float_type(value); });
    cli.option("epsilon", "e", "the RMS-norm epsilon (default 1e-5)",
               [&](const std::string& value) { o.epsilon = static_cast<float>(tools::parse_number(value)); });
    cli.section("Tensors");
    cli.option("m", "m", "rows of A (default 1)", integer(&o.m, 0));
    cli.option("act", "f16|bf16|f32", "activation dtype (default f16)",
               [&](const std::string& value) { o.activation = float_type(value); });
    cli.option("dtype", "f16|bf16|f32", "same as --act", [&](const std::string& value) { o.activation = float_type(value); });
    cli.option("scales", "f16|bf16|f32", "scales dtype (default: the activation's)",
               [&](const std::string& value) { o.scales = float_type(value); });
    cli.flag("zero-points", "add zero points", &o.zero_points);
    cli.flag("bias", "add a bias [N]", &o.bias);
    cli.flag("g-idx", "add g_idx [K] (in range)", &o.g_idx);
    cli.section("Device and policy");
    cli.option("device", "NAME", device_names() + " (default h200)", [&](const std::string& value) {
        for (const NamedDevice& device : kDevices) {
            if (value == device.name) {
                o.device = value;
                return;
            }
        }
        throw std::invalid_argument("unknown device: use " + device_names());
    });
    cli.option("policy", "original|fastest", "the kernel policy (default original)", [&](const std::string& value) {
        const std::optional<KernelPolicy> policy = parse_kernel_policy(value);
        if (!policy) {
            throw std::invalid_argument("use original or fastest");
        }
        o.policy = *policy;
    });
    for (const OverrideFlag& override_flag : kOverrideFlags) {
        cli.option(override_flag.flag, override_flag.values,
                   fmt::format("as {} (default: the environment's)", override_flag.environment),
                   [&o, field = override_flag.field](const std::string& value) { o.*field = value; });
    }
    cli.section("Output");
    cli.flag("json", "JSON instead of text", &o.json);
    cli.flag("help", "this text", &o.help);
    return cli;
}

TensorDesc tensor(DataType dtype, std::vector<std::size_t> shape)
{
    TensorDesc desc;
    desc.dtype = dtype;
    desc.shape = std::move(shape);
    return desc;
}

TensorDesc absent()
{
    TensorDesc desc;
    desc.present = false;
    return desc;
}

std::string plan_text(const PlanOptions& o)
{
    NodeAttributes attributes;
    attributes.set("K", *o.k).set("N", *o.n).set("bits", o.bits).set("block_size", o.block_size);
    attributes.set("accuracy_level", o.accuracy_level);
    if (o.folded_bias) {
        attributes.set(kFoldedBiasAttr, std::int64_t{1});
    }
    if (o.gate_up) {
        attributes.set(kGateUpSwigluAttr, std::int64_t{1});
    }
    if (o.gamma) {
        attributes.set(kRmsNormPrologueAttr, std::int64_t{1});
    }
    if (o.epsilon) {
        attributes.set(kRmsNormEpsilonAttr, *o.epsilon);
    }
    const MatMulNBitsConfig config = MatMulNBitsConfig::from_attributes(attributes);

    const auto m = static_cast<std::size_t>(o.m);
    const TensorDesc weight = tensor(DataType::Uint8, {config.n, config.k_blocks(), config.blob_size()});
    const TensorDesc scale = tensor(o.scales.value_or(o.activation), {config.n, config.k_blocks()});
    const TensorDesc zero_points = o.zero_points ? tensor(DataType::Uint8, {config.n, config.zp_row_bytes()}) : absent();
    const TensorDesc gamma = o.gamma ? tensor(*o.gamma, {config.k}) : absent();
    std::vector<TensorDesc> inputs = {tensor(o.activation, {m, config.k}), weight, scale};
    if (config.gate_up_swiglu) {
        inputs.insert(inputs.end(), {weight, scale, gamma, zero_points, zero_points});
    } else {
        inputs.insert(inputs.end(), {zero_points, o.g_idx ? tensor(DataType::Int32, {config.k}) : absent(),
                                     o.bias ? tensor(o.activation, {config.n}) : absent(), gamma});
    }
    const std::vector<TensorDesc> outputs = {tensor(o.activation, {m, config.n})};

    PlanContext context;
    for (const NamedDevice& device : kDevices) {
        if (o.device == device.name) {
            context.capabilities = device.capabilities();
        }
    }
    context.policy = o.policy;
    context.overrides = PlanOverrides::from_environment();
    // A flag, when given and valid, wins over its environment variable.
    std::map<std::string, std::string> flags;
    for (const OverrideFlag& flag : kOverrideFlags) {
        if (const std::optional<std::string>& value = o.*flag.field) {
            flags[flag.environment] = *value;
        }
    }
    context.overrides.merge(PlanOverrides::parse(flags));
    context.read_g_idx = [&config](const TensorDesc& g_idx) {
        std::vector<std::int32_t> groups(g_idx.numel());
        for (std::size_t i = 0; i < groups.size(); ++i) {
            groups[i] = static_cast<std::int32_t>(i / config.block_size);
        }
        return groups;
    };
    const LaunchPlan plan = plan_matmul_nbits(config, inputs, outputs, context);
    return o.json ? plan.to_json() : plan.describe();
}

}  // namespace

int main(int argc, char** argv)
{
    PlanOptions options;
    const tools::CommandLine cli = command_line(options);
    try {
        cli.parse(argc, argv);
    } catch (const tools::UsageError& error) {
        std::fprintf(stderr, "nbits-plan: %s\n", error.what());
        return kExitUsage;
    }
    if (options.help) {
        std::fputs((cli.help() + "\nExit status: 0 printed; 1 the node was rejected (the operator's message); 2 bad "
                                 "usage.\n")
                       .c_str(),
                   stdout);
        return 0;
    }
    if (!options.k || !options.n) {
        std::fprintf(stderr, "nbits-plan: --K and --N are required (see --help)\n");
        return kExitUsage;
    }
    try {
        std::fputs(plan_text(options).c_str(), stdout);
        return 0;
    } catch (const Error& error) {
        std::fprintf(stderr, "nbits-plan: %s\n", error.what());
        return kExitRejected;
    }
}

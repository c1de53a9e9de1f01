// nbits-plan: prints the launch plan MatMulNBits would execute for a node's
// attributes and input shapes on a named device, without a GPU.

#include "nbits/error.hpp"
#include "nbits/matmul_nbits.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

using namespace nbits;
using namespace nbits::ops;

namespace {

constexpr const char* kUsage = R"(usage: nbits-plan --K <k> --N <n> [options]

Prints the launch plan of com.microsoft::MatMulNBits: variant, reason, kernel
entries, grids, blocks, shared memory, arguments and scratch. Needs no GPU.

node:
  --K <k>, --N <n>         the node's K and N (required)
  --bits 4|8               weight bits (default 4)
  --block-size <b>         quantization block size (default 32)
  --accuracy-level <l>     accuracy_level attribute (default 0)
  --folded-bias            mark _cuda_matmul_nbits_folded_bias
  --gate-up                mark _cuda_gate_up_swiglu (paired gate/up node)
  --gamma f16|f32          mark the RMS-norm prologue and add its weight
  --epsilon <e>            the RMS-norm epsilon (default 1e-5)
tensors:
  --m <m>                  rows of A (default 1)
  --dtype f16|f32          activation dtype (default f16)
  --scales f16|f32         scales dtype (default: the activation's)
  --zero-points            add zero points
  --bias                   add a bias [N]
  --g-idx                  add g_idx [K] (in range)
device:
  --device <name>          h200 (default), rtx4090, l4, sm89-46, sm86-28, a100
  --down-cols 8|4|2        as ONNX_GENAI_DOWN_COLS (default: the environment's)
  --acc4-warps 1|2|4|8     as ONNX_GENAI_ACC4_WARPS (default: the environment's)
  --no-half-headers        plan as if NVRTC had no cuda_fp16.h
output:
  --json                   JSON instead of text
  --help                   this text
)";

const std::vector<std::string> kSwitches = {"--folded-bias", "--gate-up", "--zero-points", "--bias",
                                            "--g-idx",       "--json",    "--no-half-headers", "--help"};

std::map<std::string, std::string> parse_arguments(int argc, char** argv)
{
    std::map<std::string, std::string> options;
    for (int i = 1; i < argc; ++i) {
        const std::string name = argv[i];
        if (name.rfind("--", 0) != 0) {
            throw Error(ErrorKind::InvalidArgument, fmt::format("unexpected argument '{}' (see --help)", name));
        }
        const bool is_switch = std::find(kSwitches.begin(), kSwitches.end(), name) != kSwitches.end();
        if (!is_switch && i + 1 >= argc) {
            throw Error(ErrorKind::InvalidArgument, fmt::format("{} needs a value (see --help)", name));
        }
        options[name] = is_switch ? "" : argv[++i];
    }
    return options;
}

Capabilities device_named(const std::string& name)
{
    const std::map<std::string, Capabilities (*)()> devices = {
        {"h200", Capabilities::h200},       {"rtx4090", Capabilities::rtx4090}, {"l4", Capabilities::l4},
        {"sm89-46", Capabilities::sm89_46}, {"sm86-28", Capabilities::sm86_28}, {"a100", Capabilities::a100}};
    const auto found = devices.find(name);
    if (found == devices.end()) {
        throw Error(ErrorKind::InvalidArgument,
                    fmt::format("unknown device '{}': use h200, rtx4090, l4, sm89-46, sm86-28 or a100", name));
    }
    return found->second();
}

DataType float_type(const std::string& name)
{
    if (name == "f16") {
        return DataType::Float16;
    }
    if (name == "f32") {
        return DataType::Float32;
    }
    throw Error(ErrorKind::InvalidArgument, fmt::format("'{}' is not f16 or f32", name));
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

std::int64_t whole_number(const char* flag, const std::string& text)
{
    std::size_t used = 0;
    try {
        const long long value = std::stoll(text, &used);
        if (used == text.size()) {
            return value;
        }
    } catch (const std::exception&) {
    }
    throw Error(ErrorKind::InvalidArgument, fmt::format("{} needs a whole number, got '{}'", flag, text));
}

int run(const std::map<std::string, std::string>& options)
{
    const auto value = [&](const char* name, const char* fallback) {
        const auto found = options.find(name);
        return found != options.end() ? found->second : std::string(fallback);
    };
    const auto has = [&](const char* name) { return options.count(name) != 0; };

    NodeAttributes attributes;
    for (const auto& [flag, attribute] : {std::pair{"--K", "K"}, std::pair{"--N", "N"}, std::pair{"--bits", "bits"},
                                          std::pair{"--block-size", "block_size"},
                                          std::pair{"--accuracy-level", "accuracy_level"}}) {
        if (has(flag)) {
            attributes.set(attribute, whole_number(flag, value(flag, "")));
        }
    }
    if (!has("--block-size")) {
        attributes.set("block_size", std::int64_t{32});
    }
    const auto mark = [&](const char* flag, const char* attribute) {
        if (has(flag)) {
            attributes.set(attribute, std::int64_t{1});
        }
    };
    mark("--folded-bias", kFoldedBiasAttr);
    mark("--gate-up", kGateUpSwigluAttr);
    mark("--gamma", kRmsNormPrologueAttr);
    if (has("--epsilon")) {
        const std::string text = value("--epsilon", "");
        char* end = nullptr;
        const float epsilon = std::strtof(text.c_str(), &end);
        if (text.empty() || *end != '\0') {
            throw Error(ErrorKind::InvalidArgument, fmt::format("--epsilon needs a number, got '{}'", text));
        }
        attributes.set(kRmsNormEpsilonAttr, epsilon);
    }
    const MatMulNBitsConfig config = MatMulNBitsConfig::from_attributes(attributes);

    const DataType activation = float_type(value("--dtype", "f16"));
    const DataType scales = has("--scales") ? float_type(value("--scales", "")) : activation;
    const std::int64_t rows = whole_number("--m", value("--m", "1"));
    if (rows < 0) {
        throw Error(ErrorKind::InvalidArgument, "--m needs a count of rows, 0 or more");
    }
    const auto m = static_cast<std::size_t>(rows);
    const TensorDesc weight = tensor(DataType::Uint8, {config.n, config.k_blocks(), config.blob_size()});
    const TensorDesc scale = tensor(scales, {config.n, config.k_blocks()});
    const TensorDesc zero_points = has("--zero-points") ? tensor(DataType::Uint8, {config.n, config.zp_row_bytes()})
                                                        : absent();
    const TensorDesc gamma = has("--gamma") ? tensor(float_type(value("--gamma", "")), {config.k}) : absent();
    std::vector<TensorDesc> inputs = {tensor(activation, {m, config.k}), weight, scale};
    if (config.gate_up_swiglu) {
        inputs.insert(inputs.end(), {weight, scale, gamma, zero_points, zero_points});
    } else {
        inputs.insert(inputs.end(), {zero_points, has("--g-idx") ? tensor(DataType::Int32, {config.k}) : absent(),
                                     has("--bias") ? tensor(activation, {config.n}) : absent(), gamma});
    }
    const std::vector<TensorDesc> outputs = {tensor(activation, {m, config.n})};

    PlanContext context;
    context.capabilities = device_named(value("--device", "h200"));
    context.overrides = PlanOverrides::from_environment();
    const PlanOverrides forced = PlanOverrides::parse(
        has("--down-cols") ? std::optional(value("--down-cols", "")) : std::nullopt,
        has("--acc4-warps") ? std::optional(value("--acc4-warps", "")) : std::nullopt);
    context.overrides.down_columns = forced.down_columns ? forced.down_columns : context.overrides.down_columns;
    context.overrides.accuracy4_warps =
        forced.accuracy4_warps ? forced.accuracy4_warps : context.overrides.accuracy4_warps;
    context.half_headers_available = !has("--no-half-headers");
    context.read_g_idx = [&config](const TensorDesc& g_idx) {
        std::vector<std::int32_t> groups(g_idx.numel());
        for (std::size_t i = 0; i < groups.size(); ++i) {
            groups[i] = static_cast<std::int32_t>(i / config.block_size);
        }
        return groups;
    };

    const LaunchPlan plan = plan_matmul_nbits(config, inputs, outputs, context);
    std::fputs((has("--json") ? plan.to_json() + "\n" : plan.describe()).c_str(), stdout);
    return 0;
}

}  // namespace

int main(int argc, char** argv)
{
    try {
        const std::map<std::string, std::string> options = parse_arguments(argc, argv);
        if (options.count("--help") != 0 || argc == 1) {
            std::fputs(kUsage, stdout);
            return argc == 1 ? 2 : 0;
        }
        return run(options);
    } catch (const Error& error) {
        std::fprintf(stderr, "nbits-plan: %s\n", error.what());
        return 1;
    }
}

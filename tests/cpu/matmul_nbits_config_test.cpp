#include "matmul_nbits_fixtures.hpp"

#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <utility>

using namespace nbits;
using namespace nbits::ops;
using nbits::test::node;
using nbits::test::prefixed;

namespace {

std::string attribute_error(const NodeAttributes& attributes)
{
    try {
        MatMulNBitsConfig::from_attributes(attributes);
    } catch (const Error& error) {
        return error.what();
    }
    return "(no error)";
}

// One developer override's parsing: each accepted text gives its value, each
// ignored one (and no variable at all) leaves the field unset, and the
// variable set in the environment reaches from_environment() until unset.
void check_override(const char* name, std::optional<int> PlanOverrides::*field,
                    std::initializer_list<std::pair<const char*, int>> accepted,
                    std::initializer_list<const char*> ignored, std::pair<const char*, int> from_environment)
{
    for (const auto& [text, value] : accepted) {
        CAPTURE(text);
        CHECK(PlanOverrides::parse({{name, text}}).*field == value);
    }
    for (const char* text : ignored) {
        CAPTURE(text);
        CHECK_FALSE((PlanOverrides::parse({{name, text}}).*field).has_value());
    }
    CHECK_FALSE((PlanOverrides::parse({}).*field).has_value());
    ::setenv(name, from_environment.first, 1);
    CHECK(PlanOverrides::from_environment().*field == from_environment.second);
    ::unsetenv(name);
    CHECK_FALSE((PlanOverrides::from_environment().*field).has_value());
}

}  // namespace

TEST_CASE("attributes default to 4 bits, accuracy level 0 and no optimizer markers")
{
    NodeAttributes attributes;
    attributes.set("K", std::int64_t{4096}).set("N", std::int64_t{1024}).set("block_size", std::int64_t{32});
    const MatMulNBitsConfig config = MatMulNBitsConfig::from_attributes(attributes);
    CHECK(config.k == 4096);
    CHECK(config.n == 1024);
    CHECK(config.bits == 4);
    CHECK(config.block_size == 32);
    CHECK(config.accuracy_level == 0);
    CHECK_FALSE(config.fold_bias_post_round);
    CHECK_FALSE(config.gate_up_swiglu);
    CHECK_FALSE(config.rmsnorm_prologue);
    CHECK(config.rmsnorm_epsilon == 1e-5f);
    CHECK(config.k_blocks() == 128);
    CHECK(config.blob_size() == 16);
    CHECK(config.zp_row_bytes() == 64);
    CHECK(config.accuracy4_workspace_bytes() == 0);
}

TEST_CASE("the optimizer markers count only as the integer 1 and epsilon only as a float")
{
    NodeAttributes attributes = node(896, 4864);
    attributes.set(kFoldedBiasAttr, std::int64_t{1})
        .set(kGateUpSwigluAttr, std::int64_t{2})
        .set(kRmsNormPrologueAttr, 1.0f)
        .set(kRmsNormEpsilonAttr, std::int64_t{1});
    MatMulNBitsConfig config = MatMulNBitsConfig::from_attributes(attributes);
    CHECK(config.fold_bias_post_round);
    CHECK_FALSE(config.gate_up_swiglu);
    CHECK_FALSE(config.rmsnorm_prologue);
    CHECK(config.rmsnorm_epsilon == 1e-5f);

    attributes.set(kRmsNormPrologueAttr, std::int64_t{1}).set(kRmsNormEpsilonAttr, 1e-6f);
    config = MatMulNBitsConfig::from_attributes(attributes);
    CHECK(config.rmsnorm_prologue);
    CHECK(config.rmsnorm_epsilon == 1e-6f);
}

TEST_CASE("a non-integer accuracy_level reads as 0, like the original")
{
    NodeAttributes attributes = node(4096, 1024);
    attributes.set("accuracy_level", 4.0f);
    CHECK(MatMulNBitsConfig::from_attributes(attributes).accuracy_level == 0);
}

TEST_CASE("the accuracy-level-4 workspace holds padded K int8 values and one fp32 scale per block")
{
    const MatMulNBitsConfig config = MatMulNBitsConfig::from_attributes(node(4001, 64, 4, 32, 4));
    CHECK(config.k_blocks() == 126);
    CHECK(config.padded_k() == 4032);
    CHECK(config.accuracy4_workspace_bytes() == 4032 + 126 * 4);
    CHECK(MatMulNBitsConfig::from_attributes(node(4001, 64, 8, 32, 4)).accuracy4_workspace_bytes() == 0);
    CHECK(MatMulNBitsConfig::from_attributes(node(4001, 64, 4, 32, 0)).accuracy4_workspace_bytes() == 0);
}

TEST_CASE("attribute errors carry the original's messages")
{
    NodeAttributes missing_k;
    missing_k.set("N", std::int64_t{8}).set("block_size", std::int64_t{32});
    CHECK(attribute_error(missing_k) == prefixed("missing required integer attribute 'K'"));

    NodeAttributes float_k = node(8, 8);
    float_k.set("K", 8.0f);
    CHECK(attribute_error(float_k) == prefixed("attribute 'K' must be an integer"));
    CHECK(attribute_error(node(0, 8)) == prefixed("attribute 'K' must be positive, got 0"));
    CHECK(attribute_error(node(8, -3)) == prefixed("attribute 'N' must be positive, got -3"));

    CHECK(attribute_error(node(8, 8, 2)) ==
          prefixed("MatMulNBits CUDA supports bits in {4, 8}, got bits=2. Why: the native kernels implement packed "
                   "int4 and int8 layouts. How to fix: export bits=4 or bits=8, or select another execution "
                   "provider"));
    NodeAttributes string_bits = node(8, 8);
    string_bits.set("bits", std::string("4"));
    CHECK(attribute_error(string_bits) == prefixed("attribute 'bits' must be an integer"));

    NodeAttributes prepacked = node(8, 8);
    prepacked.set("weight_prepacked", std::int64_t{1});
    CHECK(attribute_error(prepacked) ==
          prefixed("weight_prepacked=1 is unsupported: CUDA only supports the standard (non-prepacked) layout"));

    NodeAttributes no_block;
    no_block.set("K", std::int64_t{8}).set("N", std::int64_t{8});
    CHECK(attribute_error(no_block) == prefixed("missing required integer attribute 'block_size'"));
    CHECK(attribute_error(node(8, 8, 4, 8)) ==
          prefixed("block_size must be a power of two and at least 16, got 8"));
    CHECK(attribute_error(node(8, 8, 4, 48)) ==
          prefixed("block_size must be a power of two and at least 16, got 48"));
}

TEST_CASE("attributes are checked in the original's order: K, N, bits, weight_prepacked, block_size")
{
    NodeAttributes attributes;
    attributes.set("bits", std::int64_t{3}).set("weight_prepacked", std::int64_t{1}).set("block_size", std::int64_t{7});
    CHECK(attribute_error(attributes) == prefixed("missing required integer attribute 'K'"));
    attributes.set("K", std::int64_t{8});
    CHECK(attribute_error(attributes) == prefixed("missing required integer attribute 'N'"));
    attributes.set("N", std::int64_t{8});
    CHECK(attribute_error(attributes).find("got bits=3") != std::string::npos);
    attributes.set("bits", std::int64_t{8});
    CHECK(attribute_error(attributes).find("weight_prepacked=1") != std::string::npos);
    attributes.set("weight_prepacked", std::int64_t{0});
    CHECK(attribute_error(attributes) == prefixed("block_size must be a power of two and at least 16, got 7"));
}

TEST_CASE("attribute errors are invalid arguments except layouts nbits does not implement")
{
    try {
        MatMulNBitsConfig::from_attributes(node(0, 8));
        FAIL("expected an error");
    } catch (const Error& error) {
        CHECK(error.kind() == ErrorKind::InvalidArgument);
    }
    try {
        MatMulNBitsConfig::from_attributes(node(8, 8, 2));
        FAIL("expected an error");
    } catch (const Error& error) {
        CHECK(error.kind() == ErrorKind::Unsupported);
    }
}

TEST_CASE("ONNX_GENAI_DOWN_COLS counts only as exactly 8, 4 or 2")
{
    for (const char* accepted : {"8", "4", "2"}) {
        CHECK(PlanOverrides::parse({{kDownColumnsEnv, accepted}}).down_columns == std::atoi(accepted));
    }
    for (const char* ignored : {"1", "16", "+8", " 8", "8 ", "08", "", "eight"}) {
        CAPTURE(ignored);
        CHECK_FALSE(PlanOverrides::parse({{kDownColumnsEnv, ignored}}).down_columns.has_value());
    }
    CHECK_FALSE(PlanOverrides::parse({}).down_columns.has_value());
    // The alias counts where the NBITS_* name is left out, and only there.
    CHECK(PlanOverrides::parse({{kDownColumnsAliasEnv, "4"}}).down_columns == 4);
    CHECK(PlanOverrides::parse({{kDownColumnsEnv, "2"}, {kDownColumnsAliasEnv, "4"}}).down_columns == 2);
    CHECK_FALSE(PlanOverrides::parse({{kDownColumnsEnv, "3"}, {kDownColumnsAliasEnv, "4"}}).down_columns.has_value());
    CHECK(PlanOverrides::parse({{kAccuracy4WarpsAliasEnv, "2"}}).accuracy4_warps == 2);
}

TEST_CASE("ONNX_GENAI_ACC4_WARPS parses like a Rust u32 and counts only as 1, 2, 4 or 8")
{
    check_override(kAccuracy4WarpsEnv, &PlanOverrides::accuracy4_warps,
                   {{"1", 1}, {"2", 2}, {"4", 4}, {"8", 8}, {"+4", 4}, {"004", 4}},
                   {"3", "16", "0", "-4", "4.0", " 4", "4 ", "+", "", "four", "99999999999"}, {"8", 8});
}

TEST_CASE("NBITS_PREFILL_SPLIT_K parses like ACC4_WARPS and counts only from 1 to 8")
{
    check_override(kPrefillSplitKEnv, &PlanOverrides::prefill_split_k,
                   {{"1", 1}, {"2", 2}, {"3", 3}, {"8", 8}, {"+4", 4}, {"06", 6}},
                   {"0", "9", "16", "-2", "2.0", " 2", "", "two", "99999999999"}, {"4", 4});
}

TEST_CASE("NBITS_PREFILL_WGMMA_TILE_N counts only as 128 or 256")
{
    check_override(kPrefillWgmmaTileNEnv, &PlanOverrides::prefill_wgmma_tile_n,
                   {{"128", 128}, {"256", 256}, {"+256", 256}},
                   {"64", "512", "0", "-256", " 256", "", "wide"}, {"256", 256});
}

TEST_CASE("NBITS_PREFILL_WGMMA_TILE_M counts only as 64, 128 or 256")
{
    check_override(kPrefillWgmmaTileMEnv, &PlanOverrides::prefill_wgmma_tile_m,
                   {{"64", 64}, {"128", 128}, {"256", 256}, {"+256", 256}},
                   {"32", "512", "0", "-256", " 256", "", "tall"}, {"256", 256});
}

TEST_CASE("NBITS_PREFILL_PRODUCER_WARPS counts only as 0, 1, 2 or 4")
{
    check_override(kPrefillProducerWarpsEnv, &PlanOverrides::prefill_producer_warps,
                   {{"0", 0}, {"1", 1}, {"2", 2}, {"4", 4}, {"+4", 4}}, {"3", "8", "-4", " 4", "", "all"}, {"2", 2});
}

TEST_CASE("NBITS_PREFILL_TMA counts only as 0 or 1")
{
    check_override(kPrefillTmaEnv, &PlanOverrides::prefill_tma, {{"0", 0}, {"1", 1}, {"+1", 1}},
                   {"2", "-1", " 1", "", "on"}, {"1", 1});
}

TEST_CASE("NBITS_PREFILL_TAIL_SPLIT counts only as 0 or 1")
{
    check_override(kPrefillTailSplitEnv, &PlanOverrides::prefill_tail_split, {{"0", 0}, {"1", 1}, {"+1", 1}},
                   {"2", "-1", " 1", "", "on"}, {"1", 1});
}

TEST_CASE("NBITS_PREFILL_WIDE_SPLIT counts only as 0 or 1")
{
    check_override(kPrefillWideSplitEnv, &PlanOverrides::prefill_wide_split, {{"0", 0}, {"1", 1}, {"+1", 1}},
                   {"2", "-1", " 1", "", "on"}, {"1", 1});
}

TEST_CASE("NBITS_PREFILL_STREAM_K counts only as 0 or 1")
{
    check_override(kPrefillStreamKEnv, &PlanOverrides::prefill_stream_k, {{"0", 0}, {"1", 1}, {"+1", 1}},
                   {"2", "-1", " 1", "", "on"}, {"1", 1});
}

TEST_CASE("NBITS_PREFILL_REGISTER_HANDBACK counts only as 0 or 1")
{
    check_override(kPrefillRegisterHandbackEnv, &PlanOverrides::prefill_register_handback,
                   {{"0", 0}, {"1", 1}, {"+1", 1}}, {"2", "-1", " 1", "", "on"}, {"1", 1});
}

TEST_CASE("NBITS_PREFILL_WGMMA_MIN_M counts only from 17 to 65")
{
    check_override(kPrefillWgmmaMinMEnv, &PlanOverrides::prefill_wgmma_min_m,
                   {{"17", 17}, {"33", 33}, {"65", 65}, {"+40", 40}},
                   {"16", "1", "66", "128", "0", "-17", " 17", "", "small"}, {"17", 17});
}

TEST_CASE("NBITS_DECODE_STAGE_META counts only as 0 or 1")
{
    check_override(kDecodeStageMetaEnv, &PlanOverrides::decode_stage_meta, {{"0", 0}, {"1", 1}, {"+1", 1}},
                   {"2", "-1", " 1", "", "on"}, {"1", 1});
}

TEST_CASE("NBITS_DECODE_PREFETCH counts only as 0 or 1")
{
    check_override(kDecodePrefetchEnv, &PlanOverrides::decode_prefetch, {{"0", 0}, {"1", 1}, {"+1", 1}},
                   {"2", "-1", " 1", "", "on"}, {"0", 0});
}

TEST_CASE("NBITS_DECODE_EARLY_ACTS counts only as 0 or 1")
{
    check_override(kDecodeEarlyActsEnv, &PlanOverrides::decode_early_acts, {{"0", 0}, {"1", 1}, {"+1", 1}},
                   {"2", "-1", " 1", "", "on"}, {"1", 1});
}

TEST_CASE("NBITS_DECODE_OFFSET_CODES counts only as 0, 1 or 2")
{
    check_override(kDecodeOffsetCodesEnv, &PlanOverrides::decode_offset_codes,
                   {{"0", 0}, {"1", 1}, {"+1", 1}, {"2", 2}}, {"3", "-1", " 1", "", "on"}, {"2", 2});
}

TEST_CASE("plan overrides come from the environment only through PlanOverrides::from_environment")
{
    ::setenv(kDownColumnsEnv, "4", 1);
    ::setenv(kAccuracy4WarpsEnv, "2", 1);
    PlanOverrides overrides = PlanOverrides::from_environment();
    CHECK(overrides.down_columns == 4);
    CHECK(overrides.accuracy4_warps == 2);

    ::setenv(kDownColumnsEnv, "3", 1);
    ::setenv(kAccuracy4WarpsEnv, "5", 1);
    overrides = PlanOverrides::from_environment();
    CHECK_FALSE(overrides.down_columns.has_value());
    CHECK_FALSE(overrides.accuracy4_warps.has_value());

    ::unsetenv(kDownColumnsEnv);
    ::unsetenv(kAccuracy4WarpsEnv);
    overrides = PlanOverrides::from_environment();
    CHECK_FALSE(overrides.down_columns.has_value());
    CHECK_FALSE(overrides.accuracy4_warps.has_value());

    // The plan itself never reads the environment: a set variable changes nothing without the context.
    ::setenv(kDownColumnsEnv, "8", 1);
    const test::Problem p = test::problem(node(18944, 3584));
    CHECK(test::kernel_step(p.plan(), 0).entry == "matmul_nbits_gemv_f16_scales_f16_down_c2");
    ::unsetenv(kDownColumnsEnv);
}

TEST_CASE("PlanOverrides::any says whether an override is set, merge lets the set ones of another win")
{
    CHECK_FALSE(PlanOverrides{}.any());
    CHECK_FALSE(PlanOverrides::parse({{kPrefillStreamKEnv, "2"}, {"NBITS_UNKNOWN", "1"}}).any());
    CHECK(PlanOverrides::parse({{kPrefillStreamKEnv, "0"}}).any());
    CHECK(PlanOverrides::parse({{kDecodePrefetchEnv, "1"}}).any());

    PlanOverrides base = PlanOverrides::parse({{kDownColumnsEnv, "4"}, {kPrefillStreamKEnv, "0"}});
    base.merge(PlanOverrides::parse({{kPrefillStreamKEnv, "1"}, {kDecodeStagesEnv, "3"}}));
    CHECK(base.down_columns == 4);      // unset in the other: kept
    CHECK(base.prefill_stream_k == 1);  // set in both: the other's
    CHECK(base.decode_stages == 3);     // set in the other only
    CHECK_FALSE(base.prefill_tma.has_value());
    base.merge(PlanOverrides{});
    CHECK(base.prefill_stream_k == 1);
}

TEST_CASE("data types and shapes print like the original's Rust Debug output")
{
    CHECK(std::string(to_string(DataType::Float32)) == "Float32");
    CHECK(std::string(to_string(DataType::Float16)) == "Float16");
    CHECK(std::string(to_string(DataType::BFloat16)) == "BFloat16");
    CHECK(std::string(to_string(DataType::Uint8)) == "Uint8");
    CHECK(std::string(to_string(DataType::Int8)) == "Int8");
    CHECK(std::string(to_string(DataType::Int32)) == "Int32");
    CHECK(std::string(to_string(DataType::Int64)) == "Int64");
    CHECK(format_shape({1, 4096}) == "[1, 4096]");
    CHECK(format_shape({7}) == "[7]");
    CHECK(format_shape({}) == "[]");
    CHECK(element_size(DataType::Float16) == 2);
    CHECK(element_size(DataType::Int64) == 8);
}

TEST_CASE("a tensor is contiguous when dense row-major, whatever the strides of extent-1 dimensions")
{
    TensorDesc t = test::desc(DataType::Float16, {2, 3, 4});
    CHECK(t.is_contiguous());
    t.strides = {12, 4, 1};
    CHECK(t.is_contiguous());
    t.strides = {12, 1, 3};
    CHECK_FALSE(t.is_contiguous());
    t.strides = {4, 1};
    CHECK_FALSE(t.is_contiguous());

    TensorDesc row = test::desc(DataType::Float16, {1, 4096});
    row.strides = {99999, 1};
    CHECK(row.is_contiguous());
    row.strides = {4096, 2};
    CHECK_FALSE(row.is_contiguous());

    TensorDesc empty = test::desc(DataType::Float16, {0, 4096});
    empty.strides = {1, 7};
    CHECK(empty.is_contiguous());
    CHECK(empty.numel() == 0);
    CHECK(test::desc(DataType::Float32, {}).numel() == 1);
    CHECK(test::desc(DataType::Float32, {3, 5}).byte_size() == 60);
}

TEST_CASE("dense and absent tensors")
{
    const Tensor dense = Tensor::dense(0x1000, DataType::Float16, {1, 8});
    CHECK(dense.present);
    CHECK(dense.data == 0x1000);
    CHECK(dense.numel() == 8);
    const Tensor missing = Tensor::absent(DataType::Uint8);
    CHECK_FALSE(missing.present);
    CHECK(missing.dtype == DataType::Uint8);
}

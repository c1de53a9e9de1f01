#include "ops/entries.hpp"

#include "ops/errors.hpp"

#include <fmt/format.h>

#include <utility>

namespace nbits::ops::detail {
namespace {

using EntrySource = std::pair<std::string_view, const char*>;

constexpr EntrySource kEntrySources[] = {
    {entry::dequant_f32, "dequant"},
    {entry::gemv_f32, "gemv_f32"},
    {entry::gemv_int8_f32, "gemv_f32"},
    {entry::gemv_int8_f32_block128, "gemv_f32"},
    {entry::gemv_int4_f32_block128, "gemv_f32"},
    {entry::quantize_accuracy4_block32, "accuracy4"},
    {entry::gemv_accuracy4_block32, "accuracy4"},
    {entry::gemv_accuracy4_block32_stage64, "accuracy4"},
    {entry::quantize_accuracy4_blockwise, "accuracy4"},
    {entry::gemv_accuracy4_blockwise, "accuracy4"},
    {entry::accuracy4_tiled, "accuracy4"},
    {entry::gemv_int8_f16, "gemv_f16"},
    {entry::gemv_int8_f16_splitk, "gemv_f16"},
    {entry::gemv_f16, "gemv_f16"},
    {entry::gemv_f16_general_bs, "gemv_f16"},
    {entry::gemv_f16_scales_f16, "gemv_f16"},
    {entry::gemv_f16_scales_f16_zp, "gemv_f16"},
    {entry::gemv_f16_scales_f16_zp_splitk, "gemv_f16"},
    {entry::gemv_f16_down, "gemv_f16"},
    {entry::gemv_f16_down_c4, "gemv_f16"},
    {entry::gemv_f16_down_c2, "gemv_f16"},
    {entry::gemm_f16, "gemm_f16"},
    {entry::gemm_f16_general_bs, "gemm_f16"},
    {entry::gemv_f16_rmsnorm, "rmsnorm_f16"},
    {entry::gemv_f16_rmsnorm_zp, "rmsnorm_f16"},
    {entry::gemv_int8_f16_rmsnorm, "rmsnorm_f16"},
    {entry::gemv_int8_f16_rmsnorm_zp, "rmsnorm_f16"},
    {entry::rmsnorm_prefill, "rmsnorm_f16"},
    {entry::gate_up_swiglu, "gate_up_swiglu"},
    {entry::gate_up_swiglu_zp, "gate_up_swiglu"},
    {entry::gate_up_swiglu_rmsnorm, "gate_up_swiglu"},
    {entry::gate_up_swiglu_rmsnorm_zp, "gate_up_swiglu"},
    {entry::silu_mul_f16, "pointwise"},
};

}  // namespace

const char* source_of_entry(std::string_view name)
{
    for (const EntrySource& row : kEntrySources) {
        if (row.first == name) {
            return row.second;
        }
    }
    throw Error(ErrorKind::InvalidArgument, prefixed(fmt::format("no kernel source is known for entry '{}'", name)));
}

std::vector<std::string_view> planned_entries()
{
    std::vector<std::string_view> names;
    for (const EntrySource& row : kEntrySources) {
        names.push_back(row.first);
    }
    return names;
}

}  // namespace nbits::ops::detail

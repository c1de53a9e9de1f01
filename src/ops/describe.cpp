// The one plan printer: a human page and a JSON document with the same
// content, in a fixed key order so that dumps diff cleanly.

#include "nbits/launch_plan.hpp"

#include "json_writer.hpp"

#include <fmt/format.h>

#include <string>

namespace nbits::ops {
namespace {

const char* kind_name(BufferRef::Kind kind)
{
    switch (kind) {
    case BufferRef::Kind::Null: return "null";
    case BufferRef::Kind::Input: return "input";
    case BufferRef::Kind::Output: return "output";
    case BufferRef::Kind::Scratch: return "scratch";
    case BufferRef::Kind::Workspace: return "workspace";
    }
    return "null";
}

const char* layout_name(GemmStep::WeightLayout layout)
{
    return layout == GemmStep::WeightLayout::KxN ? "KxN" : "NxK";
}

std::string ref_text(const BufferRef& ref)
{
    if (ref.kind == BufferRef::Kind::Null) {
        return "null";
    }
    if (ref.kind == BufferRef::Kind::Workspace) {
        return fmt::format("workspace+{}", ref.offset);
    }
    std::string text = fmt::format("{}[{}]", kind_name(ref.kind), ref.index);
    return ref.offset == 0 ? text : fmt::format("{}+{}", text, ref.offset);
}

std::string arg_text(const KernelArg& arg)
{
    if (const auto* ref = std::get_if<BufferRef>(&arg)) {
        return ref_text(*ref);
    }
    if (const auto* value = std::get_if<std::int32_t>(&arg)) {
        return fmt::format("i32 {}", *value);
    }
    if (const auto* map = std::get_if<TensorMapArg>(&arg)) {
        return fmt::format("tensor map of {} ({} x {}, box {} x {}{})", ref_text(map->base), map->rows, map->width,
                           map->box_rows, map->box_width, map->swizzle_128b ? ", 128B swizzle" : "");
    }
    return fmt::format("f32 {}", std::get<float>(arg));
}

std::string dim_text(const Dim3& d) { return fmt::format("{}x{}x{}", d.x, d.y, d.z); }

void write_ref(JsonWriter& json, const BufferRef& ref)
{
    json.begin_object()
        .field("buffer", kind_name(ref.kind))
        .field("index", ref.index)
        .field("offset", ref.offset)
        .end_object();
}

void write_dim(JsonWriter& json, const Dim3& d) { json.begin_array().value(d.x).value(d.y).value(d.z).end_array(); }

void write_step(JsonWriter& json, const KernelStep& step)
{
    json.begin_object()
        .field("kind", "kernel")
        .field("source", step.source)
        .field("entry", step.entry)
        .field("what", step.what);
    json.key("defines").begin_array();
    for (const std::string& define : step.defines) {
        json.value(define);
    }
    json.end_array();
    json.key("grid");
    write_dim(json, step.config.grid);
    json.key("block");
    write_dim(json, step.config.block);
    json.field("dynamic_shared_bytes", step.config.dynamic_shared_bytes)
        .field("configure_shared_memory", step.configure_shared_memory)
        .field("programmatic_dependent", step.config.programmatic_dependent);
    json.key("args").begin_array();
    for (const KernelArg& arg : step.args) {
        json.begin_object();
        if (const auto* ref = std::get_if<BufferRef>(&arg)) {
            json.key("pointer");
            write_ref(json, *ref);
        } else if (const auto* value = std::get_if<std::int32_t>(&arg)) {
            json.field("i32", *value);
        } else if (const auto* map = std::get_if<TensorMapArg>(&arg)) {
            json.key("tensor_map").begin_object().key("pointer");
            write_ref(json, map->base);
            json.field("width", map->width)
                .field("rows", map->rows)
                .field("row_bytes", map->row_bytes)
                .field("box_width", map->box_width)
                .field("box_rows", map->box_rows)
                .field("swizzle_128b", map->swizzle_128b)
                .end_object();
        } else {
            json.field("f32", static_cast<double>(std::get<float>(arg)));
        }
        json.end_object();
    }
    json.end_array();
    json.key("alignment").begin_array();
    for (const AlignmentRequirement& a : step.alignment) {
        json.begin_object().field("tensor", a.tensor).key("pointer");
        write_ref(json, a.buffer);
        json.field("bytes", a.bytes).end_object();
    }
    json.end_array().end_object();
}

void write_step(JsonWriter& json, const GemmStep& step)
{
    json.begin_object().field("kind", "gemm").field("dtype", to_string(step.dtype));
    json.field("y_dtype", to_string(step.y_dtype.value_or(step.dtype)));
    json.field("weight_layout", layout_name(step.weight_layout));
    for (const auto& [name, ref] : {std::pair{"a", &step.a}, std::pair{"w", &step.w}, std::pair{"y", &step.y},
                                    std::pair{"bias", &step.bias}}) {
        json.key(name);
        write_ref(json, *ref);
    }
    json.field("m", step.m).field("k", step.k).field("n", step.n).field("ldy", step.ldy).key("workspace");
    write_ref(json, step.workspace);
    json.field("workspace_bytes", step.workspace_bytes).end_object();
}

std::string describe_step(const KernelStep& step)
{
    std::string args;
    for (std::size_t i = 0; i < step.args.size(); ++i) {
        args += (i == 0 ? "" : ", ") + arg_text(step.args[i]);
    }
    std::string defines;
    for (const std::string& define : step.defines) {
        defines += " -D" + define;
    }
    std::string text = fmt::format(
        "  kernel {} ({}.cu{}) — {}\n    grid {} block {} shared {} bytes{}{}\n    args: {}\n", step.entry, step.source,
        defines, step.what, dim_text(step.config.grid), dim_text(step.config.block), step.config.dynamic_shared_bytes,
        step.configure_shared_memory ? " (opt-in configured)" : "",
        step.config.programmatic_dependent ? ", programmatic dependent launch" : "", args);
    for (const AlignmentRequirement& a : step.alignment) {
        text += fmt::format("    align {} to {} bytes\n", a.tensor, a.bytes);
    }
    return text;
}

std::string describe_step(const GemmStep& step)
{
    const std::string y_type = step.y_dtype ? fmt::format(" {}", to_string(*step.y_dtype)) : std::string();
    return fmt::format("  cuBLASLt GEMM {}{} Y[{}x{}] = A[{}x{}] · W({}): a={}, w={}, y={}, bias={}, workspace={} "
                       "({} bytes)\n",
                       to_string(step.dtype), y_type, step.m, step.n, step.m, step.k, layout_name(step.weight_layout),
                       ref_text(step.a), ref_text(step.w), ref_text(step.y), ref_text(step.bias),
                       ref_text(step.workspace), step.workspace_bytes);
}

}  // namespace

std::string LaunchPlan::describe() const
{
    std::string text = fmt::format("policy: {}\nvariant: {}\nreason: {}\n", to_string(policy), variant, reason());
    if (bias_stage) {
        text += fmt::format("bias stage: {} — {}\n", *bias_stage, bias_stage_reason.value_or(""));
    }
    text += fmt::format("capture safe: {}\nflops: {}\n", capture_safe ? "yes" : "no", flops);
    for (std::size_t i = 0; i < scratch_bytes.size(); ++i) {
        text += fmt::format("scratch[{}]: {} bytes\n", i, scratch_bytes[i]);
    }
    text += steps.empty() ? "steps: none (nothing to launch)\n" : fmt::format("steps: {}\n", steps.size());
    for (const PlanStep& step : steps) {
        text += std::visit([](const auto& s) { return describe_step(s); }, step);
    }
    return text;
}

std::string LaunchPlan::to_json() const
{
    JsonWriter json;
    json.begin_object()
        .field("policy", to_string(policy))
        .field("variant", variant)
        .field("reason", reason());
    bias_stage ? json.field("bias_stage", *bias_stage) : json.key("bias_stage").null();
    bias_stage_reason ? json.field("bias_stage_reason", *bias_stage_reason) : json.key("bias_stage_reason").null();
    json.field("capture_safe", capture_safe)
        .field("checks_group_indices", checks_group_indices)
        .field("flops", flops);
    json.key("scratch_bytes").begin_array();
    for (const std::size_t bytes : scratch_bytes) {
        json.value(bytes);
    }
    json.end_array().field("workspace_bytes", workspace_bytes());
    json.key("steps").begin_array();
    for (const PlanStep& step : steps) {
        std::visit([&json](const auto& s) { write_step(json, s); }, step);
    }
    json.end_array().end_object();
    return json.str();
}

}  // namespace nbits::ops

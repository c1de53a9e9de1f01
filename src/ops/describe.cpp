#include "nbits/ops/launch_plan.hpp"

#include <fmt/format.h>

#include <cmath>
#include <string>

// The plan dump of nbits-plan: a human page and a JSON document with the same
// content, in a fixed key order so that dumps diff cleanly.

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
    return fmt::format("f32 {}", std::get<float>(arg));
}

std::string dim_text(const Dim3& d) { return fmt::format("{}x{}x{}", d.x, d.y, d.z); }

std::string json_string(const std::string& text)
{
    std::string out = "\"";
    for (const char c : text) {
        switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\t': out += "\\t"; break;
        case '\r': out += "\\r"; break;
        default:
            if (static_cast<unsigned char>(c) < 0x20) {
                out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
            } else {
                out += c;  // UTF-8 passes through (the reasons use "→" and "≠")
            }
        }
    }
    return out + "\"";
}

std::string json_ref(const BufferRef& ref)
{
    return fmt::format(R"({{"buffer":"{}","index":{},"offset":{}}})", kind_name(ref.kind), ref.index, ref.offset);
}

std::string json_float(float value)
{
    // JSON has no NaN or infinity; an attribute may still carry one.
    return std::isfinite(value) ? fmt::format("{}", value) : json_string(fmt::format("{}", value));
}

std::string json_arg(const KernelArg& arg)
{
    if (const auto* ref = std::get_if<BufferRef>(&arg)) {
        return fmt::format(R"({{"pointer":{}}})", json_ref(*ref));
    }
    if (const auto* value = std::get_if<std::int32_t>(&arg)) {
        return fmt::format(R"({{"i32":{}}})", *value);
    }
    return fmt::format(R"({{"f32":{}}})", json_float(std::get<float>(arg)));
}

std::string json_dim(const Dim3& d) { return fmt::format("[{},{},{}]", d.x, d.y, d.z); }

template <typename T, typename F>
std::string json_array(const std::vector<T>& items, F&& render)
{
    std::string out = "[";
    for (std::size_t i = 0; i < items.size(); ++i) {
        out += (i == 0 ? "" : ",") + render(items[i]);
    }
    return out + "]";
}

std::string json_step(const KernelStep& step)
{
    return fmt::format(
        R"({{"kind":"kernel","source":{},"entry":{},"what":{},"grid":{},"block":{},"dynamic_shared_bytes":{},)"
        R"("configure_shared_memory":{},"args":{},"alignment":{}}})",
        json_string(step.source), json_string(step.entry), json_string(step.what), json_dim(step.config.grid),
        json_dim(step.config.block), step.config.dynamic_shared_bytes, step.configure_shared_memory,
        json_array(step.args, json_arg), json_array(step.alignment, [](const AlignmentRequirement& a) {
            return fmt::format(R"({{"tensor":{},"pointer":{},"bytes":{}}})", json_string(a.tensor),
                               json_ref(a.buffer), a.bytes);
        }));
}

std::string json_step(const GemmStep& step)
{
    return fmt::format(
        R"({{"kind":"gemm","dtype":"{}","a":{},"w":{},"y":{},"bias":{},"m":{},"k":{},"n":{},"workspace":{},)"
        R"("workspace_bytes":{}}})",
        step.dtype == blas::GemmDtype::F32 ? "f32" : "f16", json_ref(step.a), json_ref(step.w), json_ref(step.y),
        json_ref(step.bias), step.m, step.k, step.n, json_ref(step.workspace), step.workspace_bytes);
}

std::string describe_step(const KernelStep& step)
{
    std::string args;
    for (std::size_t i = 0; i < step.args.size(); ++i) {
        args += (i == 0 ? "" : ", ") + arg_text(step.args[i]);
    }
    std::string text = fmt::format("  kernel {} ({}.cu) — {}\n    grid {} block {} shared {} bytes{}\n    args: {}\n",
                                   step.entry, step.source, step.what, dim_text(step.config.grid),
                                   dim_text(step.config.block), step.config.dynamic_shared_bytes,
                                   step.configure_shared_memory ? " (opt-in configured)" : "", args);
    for (const AlignmentRequirement& a : step.alignment) {
        text += fmt::format("    align {} to {} bytes\n", a.tensor, a.bytes);
    }
    return text;
}

std::string describe_step(const GemmStep& step)
{
    return fmt::format("  cuBLASLt GEMM {} Y[{}x{}] = A[{}x{}] · W[{}x{}]: a={}, w={}, y={}, bias={}, workspace={} "
                       "({} bytes)\n",
                       step.dtype == blas::GemmDtype::F32 ? "f32" : "f16", step.m, step.n, step.m, step.k, step.k,
                       step.n, ref_text(step.a), ref_text(step.w), ref_text(step.y), ref_text(step.bias),
                       ref_text(step.workspace), step.workspace_bytes);
}

}  // namespace

std::string LaunchPlan::describe() const
{
    std::string text = fmt::format("variant: {}\nreason: {}\n", variant, reason);
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
    if (synchronize_after) {
        text += "then: synchronize the stream before freeing scratch\n";
    }
    return text;
}

std::string LaunchPlan::to_json() const
{
    const auto optional_string = [](const std::optional<std::string>& value) {
        return value ? json_string(*value) : std::string("null");
    };
    return fmt::format(
        R"({{"variant":{},"reason":{},"bias_stage":{},"bias_stage_reason":{},"capture_safe":{},"flops":{},)"
        R"("scratch_bytes":{},"synchronize_after":{},"steps":{}}})",
        json_string(variant), json_string(reason), optional_string(bias_stage), optional_string(bias_stage_reason),
        capture_safe, flops, json_array(scratch_bytes, [](std::size_t b) { return std::to_string(b); }),
        synchronize_after,
        json_array(steps, [](const PlanStep& step) {
            return std::visit([](const auto& s) { return json_step(s); }, step);
        }));
}

}  // namespace nbits::ops

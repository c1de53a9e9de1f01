#include "shapes.hpp"

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
    {Projection::Qkv, "qkv"},
    {Projection::O, "o"},
    {Projection::GateUp, "gateup"},
    {Projection::GateUpUnpaired, "gateup_unpaired"},
    {Projection::Up, "up"},
    {Projection::Down, "down"},
    {Projection::LmHead, "lm_head"},
    {Projection::Custom, "custom"},
};

bool equal_ignoring_case(std::string_view a, std::string_view b)
{
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
               return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
           });
}

}  // namespace

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

std::string BenchShape::label() const
{
    if (projection == Projection::Custom) {
        return "custom";
    }
    return model + " " + to_string(projection);
}

BenchShape model_shape(const ModelDims& model, Projection projection, std::size_t m)
{
    BenchShape shape;
    shape.model = model.name;
    shape.projection = projection;
    shape.m = m;
    // The attention output projection maps heads x head_dim back to hidden;
    // for all five models heads x head_dim equals hidden.
    switch (projection) {
        case Projection::Qkv: shape.k = model.hidden; shape.n = model.qkv; break;
        case Projection::O: shape.k = model.hidden; shape.n = model.hidden; break;
        case Projection::GateUp: shape.k = model.hidden; shape.n = model.intermediate; break;
        case Projection::GateUpUnpaired: shape.k = model.hidden; shape.n = 2 * model.intermediate; break;
        case Projection::Up: shape.k = model.hidden; shape.n = model.intermediate; break;
        case Projection::Down: shape.k = model.intermediate; shape.n = model.hidden; break;
        case Projection::LmHead: shape.k = model.hidden; shape.n = model.vocab; break;
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
    constexpr std::int64_t kLargest = std::int64_t{1} << 31;
    shape.k = static_cast<std::size_t>(tools::parse_integer(numbers[0], 1, kLargest));
    shape.n = static_cast<std::size_t>(tools::parse_integer(numbers[1], 1, kLargest));
    if (numbers.size() == 3) {
        shape.m = static_cast<std::size_t>(tools::parse_integer(numbers[2], 1, kLargest));
    }
    return shape;
}

std::vector<Projection> default_projections()
{
    return {Projection::Qkv, Projection::O, Projection::GateUp, Projection::Down};
}

std::vector<BenchShape> default_shapes()
{
    std::vector<BenchShape> shapes;
    for (const ModelDims& model : known_models()) {
        for (Projection projection : default_projections()) {
            shapes.push_back(model_shape(model, projection, 1));
        }
    }
    shapes.push_back(model_shape(find_model("Llama-3-8B"), Projection::LmHead, 1));
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

std::string describe_shape_sets()
{
    std::string text =
        "Models (K x N per projection; gateup is the paired node: N = intermediate, two weights; gateup_unpaired\n"
        "one node of N = 2 x intermediate; up one unfused gate or up projection):\n";
    const Projection all[] = {Projection::Qkv, Projection::O,    Projection::GateUp, Projection::GateUpUnpaired,
                              Projection::Up,  Projection::Down, Projection::LmHead};
    for (const ModelDims& model : known_models()) {
        text += fmt::format("  {}\n", model.name);
        for (Projection projection : all) {
            const BenchShape shape = model_shape(model, projection, 1);
            text += fmt::format("    {:<16} K={:<6} N={}\n", to_string(projection), shape.k, shape.n);
        }
    }
    auto list = [&](const char* title, const std::vector<BenchShape>& shapes) {
        text += fmt::format("\n{}:\n", title);
        for (const BenchShape& shape : shapes) {
            text += fmt::format("  {:<30} M={:<5} K={:<6} N={}\n", shape.label(), shape.m, shape.k, shape.n);
        }
    };
    list("Default set (no arguments)", default_shapes());
    list("Quick set (--quick)", quick_shapes());
    return text;
}

}  // namespace nbits::bench

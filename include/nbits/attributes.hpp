#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>

namespace nbits {

// The attributes of one ONNX node, as an engine hands them over.
class NodeAttributes {
public:
    using Value = std::variant<std::int64_t, float, std::string>;

    NodeAttributes& set(const std::string& name, std::int64_t value);
    NodeAttributes& set(const std::string& name, float value);
    NodeAttributes& set(const std::string& name, std::string value);

    const Value* find(const std::string& name) const;
    // The value if the attribute is an integer; nullopt if absent or not one.
    std::optional<std::int64_t> as_int(const std::string& name) const;
    std::optional<float> as_float(const std::string& name) const;
    bool has(const std::string& name) const { return find(name) != nullptr; }

private:
    std::map<std::string, Value> values_;
};

}  // namespace nbits

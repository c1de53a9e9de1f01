#include "nbits/ops/attributes.hpp"

namespace nbits {

NodeAttributes& NodeAttributes::set(const std::string& name, std::int64_t value)
{
    values_[name] = value;
    return *this;
}

NodeAttributes& NodeAttributes::set(const std::string& name, float value)
{
    values_[name] = value;
    return *this;
}

NodeAttributes& NodeAttributes::set(const std::string& name, std::string value)
{
    values_[name] = std::move(value);
    return *this;
}

const NodeAttributes::Value* NodeAttributes::find(const std::string& name) const
{
    const auto found = values_.find(name);
    return found == values_.end() ? nullptr : &found->second;
}

std::optional<std::int64_t> NodeAttributes::as_int(const std::string& name) const
{
    const Value* value = find(name);
    if (value == nullptr || !std::holds_alternative<std::int64_t>(*value)) {
        return std::nullopt;
    }
    return std::get<std::int64_t>(*value);
}

std::optional<float> NodeAttributes::as_float(const std::string& name) const
{
    const Value* value = find(name);
    if (value == nullptr || !std::holds_alternative<float>(*value)) {
        return std::nullopt;
    }
    return std::get<float>(*value);
}

}  // namespace nbits

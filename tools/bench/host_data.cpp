#include "host_data.hpp"

#include "host_half.hpp"

#include <cmath>
#include <cstring>
#include <functional>
#include <stdexcept>

namespace nbits::bench {
namespace {

void store(DataType dtype, std::uint8_t* data, std::size_t index, double value)
{
    if (dtype == DataType::Float16) {
        const std::uint16_t half = float_to_half(static_cast<float>(value));
        std::memcpy(data + index * 2, &half, 2);
    } else if (dtype == DataType::Float32) {
        const float single = static_cast<float>(value);
        std::memcpy(data + index * 4, &single, 4);
    } else {
        throw std::logic_error("nbits-bench stores only fp16 and fp32 values");
    }
}

// Scales chosen so that each output has a standard deviation near 2 for any
// K: large enough that fp16 keeps its relative precision, small enough that
// no fp16 intermediate overflows.
double scale_base(const QuantLayout& layout)
{
    const double levels = std::ldexp(1.0, static_cast<int>(layout.bits));
    const double code_std = std::sqrt((levels * levels - 1.0) / 12.0);
    const double activation_std = std::sqrt(1.0 / 3.0);  // uniform in [-1, 1)
    return 2.0 / (std::sqrt(static_cast<double>(layout.k)) * activation_std * code_std);
}

}  // namespace

void Rng::fill_bytes(std::uint8_t* data, std::size_t count)
{
    std::size_t i = 0;
    for (; i + 8 <= count; i += 8) {
        const std::uint64_t word = next();
        std::memcpy(data + i, &word, 8);
    }
    if (i < count) {
        const std::uint64_t word = next();
        std::memcpy(data + i, &word, count - i);
    }
}

std::uint64_t shape_seed(std::uint64_t run_seed, const BenchShape& shape)
{
    const std::string key = shape.label() + "/" + std::to_string(shape.m) + "/" + std::to_string(shape.k) + "/" +
                            std::to_string(shape.n);
    Rng mix(run_seed ^ std::hash<std::string>{}(key));
    return mix.next();
}

HostData::HostData(const Node& node, std::uint64_t seed) : node_(node), bytes_(node.inputs.size())
{
    Rng rng(seed);
    const double base = scale_base(node.layout);
    for (std::size_t i = 0; i < node.inputs.size(); ++i) {
        const NodeInput& input = node.inputs[i];
        if (!input.desc.present) {
            continue;
        }
        std::vector<std::uint8_t>& bytes = bytes_[i];
        bytes.resize(input.desc.byte_size());
        const std::size_t count = input.desc.numel();
        switch (input.role) {
            case Role::Packed:
            case Role::ZeroPoints:
                // Every byte is a valid pair of int4 codes or one int8 code.
                rng.fill_bytes(bytes.data(), bytes.size());
                break;
            case Role::Scales:
                for (std::size_t e = 0; e < count; ++e) {
                    store(input.desc.dtype, bytes.data(), e, base * rng.uniform(0.5, 1.5));
                }
                break;
            case Role::Gamma:
                for (std::size_t e = 0; e < count; ++e) {
                    store(input.desc.dtype, bytes.data(), e, rng.uniform(0.5, 1.5));
                }
                break;
            case Role::Activation:
            case Role::Bias:
                for (std::size_t e = 0; e < count; ++e) {
                    store(input.desc.dtype, bytes.data(), e, rng.uniform(-1.0, 1.0));
                }
                break;
            case Role::GroupIndex:
                throw std::logic_error("nbits-bench never binds g_idx");
        }
    }
}

int HostData::find(Role role, int projection) const
{
    for (std::size_t i = 0; i < node_.inputs.size(); ++i) {
        const NodeInput& input = node_.inputs[i];
        if (input.desc.present && input.role == role && input.projection == projection) {
            return static_cast<int>(i);
        }
    }
    return -1;
}

double load_float(const std::uint8_t* data, DataType dtype, std::size_t index)
{
    if (dtype == DataType::Float16) {
        std::uint16_t half;
        std::memcpy(&half, data + index * 2, 2);
        return half_to_float(half);
    }
    float single;
    std::memcpy(&single, data + index * 4, 4);
    return single;
}

double HostData::value(int slot, std::size_t index) const
{
    const auto position = static_cast<std::size_t>(slot);
    return load_float(bytes_.at(position).data(), node_.inputs[position].desc.dtype, index);
}

double HostData::weight(int projection, std::size_t column, std::size_t depth) const
{
    const QuantLayout& q = node_.layout;
    const std::size_t block = depth / q.block_size;
    const std::size_t within = depth % q.block_size;
    const std::vector<std::uint8_t>& packed = bytes_[static_cast<std::size_t>(find(Role::Packed, projection))];
    const std::uint8_t byte = packed[(column * q.k_blocks() + block) * q.blob_size() + within * q.bits / 8];
    // int4: the even depth of a byte sits in its low nibble.
    const int code = q.bits == 8 ? byte : ((within & 1) ? byte >> 4 : byte & 15);

    int zero_point = 1 << (q.bits - 1);
    const int zp_slot = find(Role::ZeroPoints, projection);
    if (zp_slot >= 0) {
        const std::vector<std::uint8_t>& zp = bytes_[static_cast<std::size_t>(zp_slot)];
        if (q.bits == 8) {
            zero_point = zp[column * q.zp_row_bytes() + block];
        } else {
            const std::uint8_t pair = zp[column * q.zp_row_bytes() + block / 2];
            zero_point = (block & 1) ? pair >> 4 : pair & 15;
        }
    }
    const double scale = value(find(Role::Scales, projection), column * q.k_blocks() + block);
    return static_cast<double>(code - zero_point) * scale;
}

}  // namespace nbits::bench

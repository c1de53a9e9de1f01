#include "jit/target.hpp"

#include "nbits/error.hpp"

#include <fmt/format.h>

#include <cctype>

namespace nbits::jit {

Target Target::parse(std::string_view text)
{
    ImageKind kind;
    std::string_view digits;
    if (text.substr(0, 3) == "sm_") {
        kind = ImageKind::Cubin;
        digits = text.substr(3);
    } else if (text.substr(0, 8) == "compute_") {
        kind = ImageKind::Ptx;
        digits = text.substr(8);
    } else {
        throw Error(ErrorKind::InvalidArgument,
                    fmt::format("'{}' is not a GPU architecture. How to fix: write sm_XY (CUBIN for one GPU "
                                "generation, e.g. sm_90) or compute_XY (PTX, e.g. compute_80)",
                                text));
    }
    const bool arch_specific = digits.size() >= 3 && digits.back() == 'a';
    if (arch_specific) {
        digits.remove_suffix(1);
    }
    bool numeric = digits.size() >= 2 && digits.size() <= 3;
    for (char c : digits) {
        numeric = numeric && std::isdigit(static_cast<unsigned char>(c));
    }
    if (!numeric) {
        throw Error(ErrorKind::InvalidArgument,
                    fmt::format("'{}' is not a GPU architecture: expected two or three digits after the prefix, "
                                "as in sm_90 or compute_80",
                                text));
    }
    const int value = std::stoi(std::string(digits));
    return Target{value / 10, value % 10, kind, arch_specific};
}

std::string Target::str() const
{
    return fmt::format("{}_{}{}{}", kind == ImageKind::Cubin ? "sm" : "compute", major, minor, arch_specific ? "a" : "");
}

}  // namespace nbits::jit

#include "kernels.hpp"

#include "nbits/error.hpp"

#include <fmt/format.h>

namespace nbits::detail {
const jit::EmbeddedFileSet& embedded_kernel_files();
}

namespace nbits::kernels {

const std::vector<jit::KernelSource>& all()
{
    static const std::vector<jit::KernelSource> sources = jit::sources_from(detail::embedded_kernel_files());
    return sources;
}

const jit::KernelSource& source(std::string_view name)
{
    for (const jit::KernelSource& candidate : all()) {
        if (candidate.name() == name) {
            return candidate;
        }
    }
    throw Error(ErrorKind::InvalidArgument, fmt::format("nbits embeds no kernel source named '{}'", name));
}

const jit::KernelSource& source_of_entry(std::string_view entry)
{
    for (const jit::KernelSource& candidate : all()) {
        if (candidate.has_entry(entry)) {
            return candidate;
        }
    }
    throw Error(ErrorKind::InvalidArgument, fmt::format("nbits embeds no kernel entry named '{}'", entry));
}

}  // namespace nbits::kernels

#pragma once

// An operator's plans, remembered by the tensors' signature: dtype, shape,
// strides and presence of every input and output (addresses are checked per
// run, not planned). A hit compares the signature in place: no allocation,
// no formatting.

#include "nbits/matmul_nbits.hpp"
#include "ops/execute.hpp"

#include <cstdint>
#include <memory>
#include <vector>

namespace nbits::ops::detail {

class PlanCache {
public:
    // A prefill node sees a new M per prompt length; the oldest plan goes first.
    static constexpr std::size_t kCapacity = 64;

    struct Entry {
        std::vector<std::int64_t> signature;
        std::shared_ptr<const LaunchPlan> plan;
        PlanFunctions functions;
    };

    // The entry for these tensors, counted as a hit, or nullptr, counted as a miss.
    const Entry* find(const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs);
    const Entry* find(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs);
    const Entry& insert(const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs,
                        std::shared_ptr<const LaunchPlan> plan, PlanFunctions functions);
    void clear();
    PlanCacheStats stats() const;

private:
    template <typename T>
    const Entry* find_any(const std::vector<T>& inputs, const std::vector<T>& outputs);

    std::vector<std::unique_ptr<Entry>> entries_;
    PlanCacheStats stats_;
};

}  // namespace nbits::ops::detail

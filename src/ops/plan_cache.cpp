#include "ops/plan_cache.hpp"

namespace nbits::ops::detail {
namespace {

// The plan-relevant description of the tensors, flattened: counts, then per
// tensor presence, dtype, rank, extents, stride count and strides.
void append_signature(std::vector<std::int64_t>& signature, const TensorDesc& tensor)
{
    signature.push_back(tensor.present ? 1 : 0);
    signature.push_back(static_cast<std::int64_t>(tensor.dtype));
    signature.push_back(static_cast<std::int64_t>(tensor.shape.size()));
    for (const std::size_t extent : tensor.shape) {
        signature.push_back(static_cast<std::int64_t>(extent));
    }
    signature.push_back(static_cast<std::int64_t>(tensor.strides.size()));
    signature.insert(signature.end(), tensor.strides.begin(), tensor.strides.end());
}

std::vector<std::int64_t> signature_of(const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs)
{
    std::vector<std::int64_t> signature;
    signature.push_back(static_cast<std::int64_t>(inputs.size()));
    signature.push_back(static_cast<std::int64_t>(outputs.size()));
    for (const TensorDesc& tensor : inputs) {
        append_signature(signature, tensor);
    }
    for (const TensorDesc& tensor : outputs) {
        append_signature(signature, tensor);
    }
    return signature;
}

// signature_of(inputs, outputs) == signature, without building it.
class SignatureMatcher {
public:
    explicit SignatureMatcher(const std::vector<std::int64_t>& signature) : signature_(signature) {}

    template <typename T>
    bool matches(const std::vector<T>& inputs, const std::vector<T>& outputs)
    {
        if (!next(static_cast<std::int64_t>(inputs.size())) || !next(static_cast<std::int64_t>(outputs.size()))) {
            return false;
        }
        for (const std::vector<T>* tensors : {&inputs, &outputs}) {
            for (const TensorDesc& tensor : *tensors) {
                if (!next(tensor.present ? 1 : 0) || !next(static_cast<std::int64_t>(tensor.dtype)) ||
                    !next(static_cast<std::int64_t>(tensor.shape.size()))) {
                    return false;
                }
                for (const std::size_t extent : tensor.shape) {
                    if (!next(static_cast<std::int64_t>(extent))) {
                        return false;
                    }
                }
                if (!next(static_cast<std::int64_t>(tensor.strides.size()))) {
                    return false;
                }
                for (const std::int64_t stride : tensor.strides) {
                    if (!next(stride)) {
                        return false;
                    }
                }
            }
        }
        return at_ == signature_.size();
    }

private:
    bool next(std::int64_t value) { return at_ < signature_.size() && signature_[at_++] == value; }

    const std::vector<std::int64_t>& signature_;
    std::size_t at_ = 0;
};

}  // namespace

template <typename T>
const PlanCache::Entry* PlanCache::find_any(const std::vector<T>& inputs, const std::vector<T>& outputs)
{
    for (const std::unique_ptr<Entry>& entry : entries_) {
        if (SignatureMatcher(entry->signature).matches(inputs, outputs)) {
            ++stats_.hits;
            return entry.get();
        }
    }
    ++stats_.misses;
    return nullptr;
}

const PlanCache::Entry* PlanCache::find(const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs)
{
    return find_any(inputs, outputs);
}

const PlanCache::Entry* PlanCache::find(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs)
{
    return find_any(inputs, outputs);
}

const PlanCache::Entry& PlanCache::insert(const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs,
                                          std::shared_ptr<const LaunchPlan> plan, PlanFunctions functions)
{
    auto entry = std::make_unique<Entry>();
    entry->signature = signature_of(inputs, outputs);
    entry->plan = std::move(plan);
    entry->functions = std::move(functions);
    if (entries_.size() >= kCapacity) {
        entries_.erase(entries_.begin());
    }
    entries_.push_back(std::move(entry));
    stats_.entries = entries_.size();
    return *entries_.back();
}

void PlanCache::clear()
{
    entries_.clear();
    stats_.entries = 0;
}

PlanCacheStats PlanCache::stats() const { return stats_; }

}  // namespace nbits::ops::detail

#pragma once

#include <algorithm>
#include <vector>

namespace nbits::startup {

// Repeated measurements of one quantity.
struct Samples {
    std::vector<double> values;

    void add(double value) { values.push_back(value); }
    bool empty() const { return values.empty(); }
    double median() const
    {
        if (values.empty()) {
            return 0.0;
        }
        std::vector<double> sorted = values;
        std::sort(sorted.begin(), sorted.end());
        const std::size_t middle = sorted.size() / 2;
        return sorted.size() % 2 == 1 ? sorted[middle] : 0.5 * (sorted[middle - 1] + sorted[middle]);
    }
    double min() const { return values.empty() ? 0.0 : *std::min_element(values.begin(), values.end()); }
    double max() const { return values.empty() ? 0.0 : *std::max_element(values.begin(), values.end()); }
};

}  // namespace nbits::startup

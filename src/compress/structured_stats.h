// The statistics of the dense model that structured pruning's criteria rank units by
// (compress/prune_structured.h), on calibration samples of its options.
#pragma once

#include <string_view>
#include <vector>

#include "calib/calib.h"
#include "compress/prune_structured.h"
#include "core/thread_pool.h"
#include "model/model.h"

namespace squeeze::compress {

struct Calibration {
  calib::CalibSamples samples;
  std::vector<std::vector<float>> row_norm, unit_norm;  // wanda, per layer: ‖x‖₂ per input channel
  std::vector<std::vector<double>> mean, var;           // flap, per layer: per unit channel
  std::vector<std::vector<double>> importance;          // taylor, per layer: per neuron
};

// o.calib_samples windows of o.calib_ctx tokens of o.calib_path (UsageError: unreadable text,
// a window longer than the model's training context).
calib::CalibSamples read_calibration_samples(const model::Model& m, const StructuredPruneOptions& o);

// One pass of the dense model over c.samples: Wanda-sp's channel norms ‖x‖₂ (row_norm of
// row_input, unit_norm of unit_input; the square roots of the calibration Hessians'
// diagonals) and FLAP's mean and variance of every channel of unit_input, in every layer.
// Throws Interrupted on cancel.
void channel_statistics(const model::Model& m, const StructuredPruneOptions& o, std::string_view row_input,
                        std::string_view unit_input, Calibration& c, ThreadPool& pool);

}  // namespace squeeze::compress

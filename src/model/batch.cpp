#include "model/batch.h"

#include <utility>

namespace squeeze::model {

ChunkLayout single_sequence(int64_t n, int32_t pos0, int32_t seq, std::vector<int32_t>& pos,
                            std::span<const int32_t> cells) {
  pos.resize(static_cast<size_t>(n));
  ChunkLayout b;
  b.n = n;
  SeqRun r;
  r.seq = seq;
  r.pos0 = pos0;
  r.cells = cells;
  r.rows.resize(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) {
    pos[t] = pos0 + static_cast<int32_t>(t);
    r.rows[t] = static_cast<int32_t>(t);
  }
  b.pos = pos;
  if (n > 0) b.runs.push_back(std::move(r));
  return b;
}

}  // namespace squeeze::model

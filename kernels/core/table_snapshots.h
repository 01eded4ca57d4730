// Snapshots of a table for checkpoints: full (Export, Import) and incremental (ExportDelta,
// ImportDelta), over the table's locked visit API (EmbeddingTable::VisitShards, ModifyRows,
// ReplaceRows), so the table itself knows nothing of their format.
//
// Thread-safety: as the table's. An export copies each shard under its lock, with the row
// layout fixed, while training goes on; an import validates everything before the first
// change. TableSnapshots holds a reference to the table and no state of its own.
#ifndef TFPS_KERNELS_CORE_TABLE_SNAPSHOTS_H_
#define TFPS_KERNELS_CORE_TABLE_SNAPSHOTS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernels/core/embedding_table.h"

namespace tfps {
namespace core {

// Everything Export() returns; Import() takes the same.
struct TableSnapshot {
  int64_t dim = 0;
  int num_slots = 0;
  std::vector<int64_t> keys;
  std::vector<float> values;     // [n, dim]
  std::vector<float> slots;      // [n, num_slots * dim]
  std::vector<int64_t> freq;     // [n]
  std::vector<int64_t> last_step;// [n]
  std::vector<float> slot_init;  // [num_slots]
};

// Where ExportInto() writes a table's rows: buffers of n keys, n * dim values,
// n * num_slots * dim slots, n freq, n last_step.
struct RowBuffers {
  int64_t* keys = nullptr;
  float* values = nullptr;
  float* slots = nullptr;
  int64_t* freq = nullptr;
  int64_t* last_step = nullptr;
};

class TableSnapshots {
 public:
  explicit TableSnapshots(EmbeddingTable& table) : table_(table) {}

  // Every row, each copied under its shard lock (value, slots and meta of one row come from
  // one moment), all in one row layout.
  void Export(TableSnapshot* snap) const;
  // Every row, all from one moment (VisitAllShards), written into the buffers that
  // alloc(layout, n) returns for n rows: the rows are copied once, with no copy of the table
  // beside them. alloc may throw (std::bad_alloc); nothing is written then.
  void ExportInto(const std::function<RowBuffers(const RowLayout&, int64_t)>& alloc) const;
  // Replaces the contents with the snapshot; false and *error (table unchanged) when its parts
  // do not fit together, its dim is not the table's, or a key appears twice.
  bool Import(const TableSnapshot& snap, std::string* error);

  // The rows updated at or after since_step (their last_step) and the keys removed at or after
  // it, and -- in the same critical section per shard, so that no removal falls between a delta
  // and the next -- empties the table's removed-keys log. When the log outgrew
  // kMaxRemovedPerShard in some shard, the delta is complete instead (*complete = true): every
  // row, no removed keys, and importing it replaces the table.
  void ExportDelta(int64_t since_step, TableSnapshot* snap, std::vector<int64_t>* removed, bool* complete);
  // Applies a delta: removes `removed`, then inserts or overwrites the snapshot's rows (or, when
  // complete, replaces the contents). Validates everything before the first change.
  bool ImportDelta(const TableSnapshot& snap, const std::vector<int64_t>& removed, bool complete,
                   std::string* error);

  // Whether the snapshot's parts fit together and its dim is `dim` (else false and *error).
  static bool Check(const TableSnapshot& snap, int64_t dim, std::string* error);

 private:
  // Every row (or, with updated_only, those updated at or after since_step) into *snap; with
  // take_removed, each shard's removed keys stamped at or after since_step go to *removed in the
  // same visit, and the result says whether some shard's log had overflowed.
  bool CopyRows(int64_t since_step, bool updated_only, TableSnapshot* snap, bool take_removed,
                std::vector<int64_t>* removed) const;

  EmbeddingTable& table_;
};

}  // namespace core
}  // namespace tfps

#endif  // TFPS_KERNELS_CORE_TABLE_SNAPSHOTS_H_

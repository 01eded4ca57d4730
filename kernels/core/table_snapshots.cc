#include "kernels/core/table_snapshots.h"

#include <cstring>

namespace tfps {
namespace core {

bool TableSnapshots::CopyRows(int64_t since_step, bool updated_only, TableSnapshot* snap, bool take_removed,
                              std::vector<int64_t>* removed) const {
  bool overflowed = false;
  int64_t slot_floats = 0;
  table_.VisitShards(
      /*exclusive=*/take_removed,
      [&](const RowLayout& layout) {
        snap->dim = layout.dim;
        snap->num_slots = layout.num_slots;
        snap->slot_init = layout.slot_init;
        slot_floats = layout.dim * layout.num_slots;
        snap->keys.clear();
        snap->values.clear();
        snap->slots.clear();
        snap->freq.clear();
        snap->last_step.clear();
      },
      [&](EmbeddingTable::LockedShard& shard) {
        const int64_t dim = snap->dim;
        shard.ForEachRow([&](int64_t key, const float* row, const RowMeta& meta) {
          if (updated_only && (meta.last_step < since_step || meta.freq == 0)) return;
          snap->keys.push_back(key);
          snap->values.insert(snap->values.end(), row, row + dim);
          snap->slots.insert(snap->slots.end(), row + dim, row + dim + slot_floats);
          snap->freq.push_back(meta.freq);
          snap->last_step.push_back(meta.last_step);
        });
        // Older removals were carried by the last delta.
        if (take_removed && shard.TakeRemoved(since_step, removed)) overflowed = true;
      });
  return overflowed;
}

void TableSnapshots::Export(TableSnapshot* snap) const {
  CopyRows(0, /*updated_only=*/false, snap, /*take_removed=*/false, nullptr);
}

void TableSnapshots::ExportInto(const std::function<RowBuffers(const RowLayout&, int64_t)>& alloc) const {
  RowBuffers out;
  int64_t dim = 0, slot_floats = 0, at = 0;
  table_.VisitAllShards(
      [&](const RowLayout& layout, int64_t rows) {
        out = alloc(layout, rows);
        dim = layout.dim;
        slot_floats = layout.dim * layout.num_slots;
      },
      [&](EmbeddingTable::LockedShard& shard) {
        shard.ForEachRow([&](int64_t key, const float* row, const RowMeta& meta) {
          out.keys[at] = key;
          std::memcpy(out.values + at * dim, row, sizeof(float) * dim);
          if (slot_floats > 0) std::memcpy(out.slots + at * slot_floats, row + dim, sizeof(float) * slot_floats);
          out.freq[at] = meta.freq;
          out.last_step[at] = meta.last_step;
          ++at;
        });
      });
}

void TableSnapshots::ExportDelta(int64_t since_step, TableSnapshot* snap, std::vector<int64_t>* removed,
                                 bool* complete) {
  removed->clear();
  *complete = CopyRows(since_step, /*updated_only=*/true, snap, /*take_removed=*/true, removed);
  if (!*complete) return;
  // Some shard's log overflowed: removals are unknown, so the delta carries every row instead
  // (a removal after a shard is copied is in its log again, for the next delta).
  removed->clear();
  CopyRows(0, /*updated_only=*/false, snap, /*take_removed=*/true, removed);
  removed->clear();
}

bool TableSnapshots::Check(const TableSnapshot& snap, int64_t dim, std::string* error) {
  const int64_t n = static_cast<int64_t>(snap.keys.size());
  if (snap.dim != dim) {
    *error = "dim " + std::to_string(snap.dim) + " does not match the table's dim " + std::to_string(dim);
    return false;
  }
  if (snap.num_slots < 0 || static_cast<int64_t>(snap.values.size()) != n * dim ||
      static_cast<int64_t>(snap.slots.size()) != n * dim * snap.num_slots ||
      static_cast<int64_t>(snap.freq.size()) != n || static_cast<int64_t>(snap.last_step.size()) != n ||
      static_cast<int64_t>(snap.slot_init.size()) != snap.num_slots) {
    *error = "snapshot parts have inconsistent sizes";
    return false;
  }
  return true;
}

bool TableSnapshots::Import(const TableSnapshot& snap, std::string* error) {
  if (!Check(snap, table_.dim(), error)) return false;
  const int64_t dim = snap.dim, slot_floats = dim * snap.num_slots;
  return table_.ReplaceRows(
      RowLayout{dim, snap.num_slots, snap.slot_init}, snap.keys.data(), static_cast<int64_t>(snap.keys.size()),
      [&](int64_t i, float* row) {
        std::memcpy(row, &snap.values[i * dim], sizeof(float) * dim);
        if (slot_floats > 0) std::memcpy(row + dim, &snap.slots[i * slot_floats], sizeof(float) * slot_floats);
        return RowMeta{snap.freq[i], snap.last_step[i]};
      },
      error);
}

bool TableSnapshots::ImportDelta(const TableSnapshot& snap, const std::vector<int64_t>& removed, bool complete,
                                 std::string* error) {
  if (!Check(snap, table_.dim(), error)) return false;
  if (complete) return Import(snap, error);
  const int64_t n = static_cast<int64_t>(snap.keys.size());
  const int table_slots = table_.num_slots();
  if (n > 0 && snap.num_slots != table_slots && table_slots != 0) {
    *error = "delta rows have " + std::to_string(snap.num_slots) + " optimizer slots, the table has " +
             std::to_string(table_slots);
    return false;
  }
  if (n > 0 && snap.num_slots != table_slots && !table_.EnsureSlots(snap.num_slots, snap.slot_init.data(), error)) {
    return false;
  }
  // Removals are stamped with the delta's latest step.
  for (int64_t step : snap.last_step) table_.NoteStep(step);
  table_.Remove(removed.data(), static_cast<int64_t>(removed.size()));
  table_.Assign(snap.keys.data(), n, snap.values.data());
  // Slots and meta of the rows just written (a row removed meanwhile by another op is skipped).
  const int64_t slot_floats = snap.dim * snap.num_slots;
  table_.ModifyRows(snap.keys.data(), n, [&](int64_t i, float* row, RowMeta* meta) {
    if (slot_floats > 0) std::memcpy(row + snap.dim, &snap.slots[i * slot_floats], sizeof(float) * slot_floats);
    *meta = RowMeta{snap.freq[i], snap.last_step[i]};
  });
  return true;
}

}  // namespace core
}  // namespace tfps

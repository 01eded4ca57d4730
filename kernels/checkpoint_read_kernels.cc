// Kernels that read a checkpoint's or a delta's parts (checkpoint_parts.h) straight from its
// bundle: a shard's restore (TfpsTableRestoreStage, then TfpsTableRestoreCommit), a shard's share
// of a delta (TfpsTableApplyDelta), and one column of a table, its parts concatenated
// (TfpsReadColumn, for stock tables).
#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/checkpoint_parts.h"
#include "kernels/core/table_snapshots.h"
#include "kernels/table_resource.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/platform/env.h"
#include "tensorflow/core/util/tensor_bundle/tensor_bundle.h"

namespace tfps {
namespace {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Status;
using tensorflow::Tensor;
using tensorflow::TensorShape;
namespace errors = tensorflow::errors;

// Reads a part's columns in slices of whole rows, for the rows in order: Row(r) for r ascending.
class PartColumns {
 public:
  PartColumns(int64_t dim, int64_t slot_floats, int64_t rows, int64_t slice_bytes)
      : dim_(dim), slot_floats_(slot_floats), rows_(rows),
        chunk_(std::max<int64_t>(1, slice_bytes / ((dim + slot_floats) * 4 + 16))) {}
  Status Open(tensorflow::Env* env, const std::string& prefix, int files, tensorflow::BundleReader& reader,
              const TableParts& parts, int64_t p) {
    const char* columns[4] = {"values", "slots", "freq", "last_step"};
    for (int c = 0; c < 4; ++c) {
      TF_RETURN_IF_ERROR(EntryReader::OpenKey(env, prefix, files, reader, parts.Key(p, columns[c]), &col_[c]));
    }
    return tensorflow::OkStatus();
  }
  // Row r's value, slots, freq and last_step; r never decreases between calls.
  Status Row(int64_t r, const float** value, const float** slots, int64_t* freq, int64_t* last_step) {
    while (r >= start_ + have_) TF_RETURN_IF_ERROR(Next());
    const int64_t i = r - start_;
    *value = &values_[i * dim_];
    *slots = slot_floats_ > 0 ? &slots_[i * slot_floats_] : nullptr;
    *freq = freq_[i];
    *last_step = last_[i];
    return tensorflow::OkStatus();
  }
  Status Finish() {
    for (auto& c : col_) TF_RETURN_IF_ERROR(c->Finish());
    return tensorflow::OkStatus();
  }

 private:
  Status Next() {
    start_ += have_;
    have_ = std::min(chunk_, rows_ - start_);
    if (have_ <= 0) return errors::Internal("read past the part's rows");
    values_.resize(have_ * dim_);
    slots_.resize(have_ * slot_floats_);
    freq_.resize(have_);
    last_.resize(have_);
    TF_RETURN_IF_ERROR(col_[0]->Read(reinterpret_cast<char*>(values_.data()), have_ * dim_ * 4));
    TF_RETURN_IF_ERROR(col_[1]->Read(reinterpret_cast<char*>(slots_.data()), have_ * slot_floats_ * 4));
    TF_RETURN_IF_ERROR(col_[2]->Read(reinterpret_cast<char*>(freq_.data()), have_ * 8));
    return col_[3]->Read(reinterpret_cast<char*>(last_.data()), have_ * 8);
  }

  const int64_t dim_, slot_floats_, rows_, chunk_;
  std::unique_ptr<EntryReader> col_[4];
  int64_t start_ = 0, have_ = 0;
  std::vector<float> values_, slots_;
  std::vector<int64_t> freq_, last_;
};

// Builds this shard's rows from every part of the checkpoint that can hold its keys (part p of
// P holds keys == p mod P; this shard j of M keys == j mod M: both only when p == j mod gcd),
// reading each in slices: the shard's new contents and its keys are the only whole copies.
class TableRestoreStageOp : public TableOpKernel {
 public:
  explicit TableRestoreStageOp(OpKernelConstruction* ctx) : TableOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_name", &name_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("slice_bytes", &slice_bytes_));
    OP_REQUIRES(ctx, slice_bytes_ > 0, errors::InvalidArgument(type_string(), ": slice_bytes must be > 0"));
  }
  void ComputeOnResource(OpKernelContext* ctx, TableResource& res) override {
    const Tensor& prefix_t = ctx->input(1);
    OP_REQUIRES(ctx, tensorflow::TensorShapeUtils::IsScalar(prefix_t.shape()),
                errors::InvalidArgument(type_string(), ": prefix must be a scalar"));
    const std::string prefix(prefix_t.scalar<tensorflow::tstring>()());
    Status s = Stage(ctx, res, prefix);
    if (!s.ok()) {
      ctx->SetStatus(Status(s.code(), "restore of table '" + name_ + "' (shard " + std::to_string(res.shard()) +
                                          " of " + std::to_string(res.num_shards()) + ") from " + prefix + ": " +
                                          std::string(s.message())));
    }
  }

 private:
  Status Stage(OpKernelContext* ctx, TableResource& res, const std::string& prefix) {
    tensorflow::Env* env = tensorflow::Env::Default();
    tensorflow::BundleReader reader(env, prefix);
    TF_RETURN_IF_ERROR(reader.status());
    int files = 0;
    TF_RETURN_IF_ERROR(DataFileCount(reader, &files));
    core::EmbeddingTable& table = res.table();
    TableParts parts;
    Status found = ReadTableParts(reader, name_, table.dim(), &parts);
    if (!found.ok()) return Status(found.code(), "table '" + name_ + "' " + std::string(found.message()));
    const int64_t m = res.num_shards(), j = res.shard();
    const int64_t g = std::gcd(parts.parts, m);
    std::vector<int64_t> read;
    for (int64_t p = 0; p < parts.parts; ++p) {
      if (FloorMod(p, g) == FloorMod(j, g)) read.push_back(p);
    }
    // Pass 1: the keys of this shard, and which rows of each part they are.
    std::vector<int64_t> keys;
    std::vector<std::vector<bool>> mine(read.size());
    std::vector<int64_t> buffer(std::min<int64_t>(std::max<int64_t>(1, slice_bytes_ / 8), std::max<int64_t>(
                                    1, *std::max_element(parts.rows.begin(), parts.rows.end()))));
    for (size_t i = 0; i < read.size(); ++i) {
      const int64_t p = read[i], n = parts.rows[p];
      std::unique_ptr<EntryReader> column;
      TF_RETURN_IF_ERROR(EntryReader::OpenKey(env, prefix, files, reader, parts.Key(p, "keys"), &column));
      mine[i].resize(n);
      for (int64_t at = 0; at < n;) {
        const int64_t c = std::min<int64_t>(n - at, static_cast<int64_t>(buffer.size()));
        TF_RETURN_IF_ERROR(column->Read(reinterpret_cast<char*>(buffer.data()), c * 8));
        for (int64_t r = 0; r < c; ++r) {
          const int64_t key = buffer[r];
          if (!parts.legacy && FloorMod(key, parts.parts) != p) {
            return errors::DataLoss("part ", p, " of ", parts.parts, " holds key ", key, ", which is not its own");
          }
          if (FloorMod(key, m) == j) {
            mine[i][at + r] = true;
            keys.push_back(key);
          }
        }
        at += c;
      }
      TF_RETURN_IF_ERROR(column->Finish());
    }
    std::vector<int64_t>().swap(buffer);
    // Pass 2: their rows, into new contents built aside.
    const int64_t dim = table.dim(), slot_floats = dim * parts.num_slots;
    Status status;
    size_t i = 0;
    int64_t r = -1;
    std::unique_ptr<PartColumns> columns;
    auto fill = [&](int64_t, float* row) -> core::RowMeta {
      core::RowMeta meta{0, 0};
      if (!status.ok()) return meta;
      for (;;) {  // the next row of this shard
        if (columns == nullptr) {
          const int64_t p = read[i];
          columns = std::make_unique<PartColumns>(dim, slot_floats, parts.rows[p], slice_bytes_);
          status = columns->Open(env, prefix, files, reader, parts, p);
          if (!status.ok()) return meta;
          r = -1;
        }
        while (++r < static_cast<int64_t>(mine[i].size()) && !mine[i][r]) {
        }
        if (r < static_cast<int64_t>(mine[i].size())) break;
        status = columns->Finish();
        columns.reset();
        ++i;
        if (!status.ok()) return meta;
      }
      const float* value = nullptr;
      const float* slots = nullptr;
      status = columns->Row(r, &value, &slots, &meta.freq, &meta.last_step);
      if (!status.ok()) return meta;
      std::memcpy(row, value, sizeof(float) * dim);
      if (slot_floats > 0) std::memcpy(row + dim, slots, sizeof(float) * slot_floats);
      return meta;
    };
    std::string error;
    auto staged = std::make_unique<TableResource::StagedRestore>();
    staged->rows = table.BuildRows(core::RowLayout{dim, static_cast<int>(parts.num_slots), parts.slot_init},
                                   keys.data(), static_cast<int64_t>(keys.size()), fill, &error);
    TF_RETURN_IF_ERROR(status);
    if (staged->rows == nullptr) return errors::InvalidArgument(error);
    std::vector<int64_t>().swap(keys);
    // The rest of every part read (rows after this shard's last one), for its checksum.
    for (; i < read.size(); ++i) {
      if (columns == nullptr) {
        columns = std::make_unique<PartColumns>(dim, slot_floats, parts.rows[read[i]], slice_bytes_);
        TF_RETURN_IF_ERROR(columns->Open(env, prefix, files, reader, parts, read[i]));
      }
      TF_RETURN_IF_ERROR(columns->Finish());
      columns.reset();
    }
    if (table.admission_size() > 0) {   // the parts' sketches' max: no key of this shard is under-counted
      TF_RETURN_IF_ERROR(MaxSketch(reader, parts, read, &staged->admission));
    }
    std::string sketch_error;
    if (!core::EmbeddingTable::AdmissionSizeFits(static_cast<int64_t>(staged->admission.size()), &sketch_error)) {
      return errors::InvalidArgument(sketch_error);
    }
    const int64_t rows = core::EmbeddingTable::StagedRows(*staged->rows);
    res.Stage(std::move(staged));
    Tensor* out = nullptr;
    TF_RETURN_IF_ERROR(ctx->allocate_output(0, TensorShape({}), &out));
    out->scalar<int64_t>()() = rows;
    return tensorflow::OkStatus();
  }

  std::string name_;
  int64_t slice_bytes_ = 0;
};

class TableRestoreCommitOp : public TableOpKernel {
 public:
  using TableOpKernel::TableOpKernel;
  void ComputeOnResource(OpKernelContext* ctx, TableResource& res) override {
    std::unique_ptr<TableResource::StagedRestore> staged = res.TakeStaged();
    OP_REQUIRES(ctx, staged != nullptr,
                errors::FailedPrecondition(type_string(), ": no restore staged on this table"));
    res.table().SwapIn(staged->rows.get());
    staged->rows.reset();
    if (!staged->admission.empty()) {
      std::string error;
      OP_REQUIRES(ctx, res.table().ImportAdmission(staged->admission.data(),
                                                   static_cast<int64_t>(staged->admission.size()), &error),
                  errors::InvalidArgument(type_string(), ": ", error));
    }
    res.set_initialized();
  }
};

// Applies shard j's share of a delta (NAME-delta-part{p}-*, any part count; checkpoint_parts.h):
// the removed keys and rows of its own keys from the parts that can hold them, or -- when the
// delta is complete (a removed-keys log overflowed, so it holds every row) -- its rows in place
// of the shard's; and the admission sketches (max). Everything is read and checked first.
class TableApplyDeltaOp : public TableOpKernel {
 public:
  explicit TableApplyDeltaOp(OpKernelConstruction* ctx) : TableOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_name", &name_));
  }
  void ComputeOnResource(OpKernelContext* ctx, TableResource& res) override {
    const Tensor& prefix_t = ctx->input(1);
    OP_REQUIRES(ctx, tensorflow::TensorShapeUtils::IsScalar(prefix_t.shape()),
                errors::InvalidArgument(type_string(), ": prefix must be a scalar"));
    const std::string prefix(prefix_t.scalar<tensorflow::tstring>()());
    Status s = Apply(res, prefix);
    if (!s.ok()) {
      ctx->SetStatus(Status(s.code(), "delta " + prefix + " of table '" + name_ + "' (shard " +
                                          std::to_string(res.shard()) + "): " + std::string(s.message())));
    }
  }

 private:
  Status Apply(TableResource& res, const std::string& prefix) {
    tensorflow::BundleReader reader(tensorflow::Env::Default(), prefix);
    TF_RETURN_IF_ERROR(reader.status());
    core::EmbeddingTable& table = res.table();
    TableParts parts;
    Status found = ReadTableParts(reader, name_ + "-delta", table.dim(), &parts);
    if (!found.ok()) return Status(found.code(), "the delta's table " + std::string(found.message()));
    const int64_t m = res.num_shards(), j = res.shard(), g = std::gcd(parts.parts, m);
    core::TableSnapshot snap;
    snap.dim = table.dim();
    snap.num_slots = static_cast<int>(parts.num_slots);
    snap.slot_init = parts.slot_init;
    const int64_t slot_floats = snap.dim * parts.num_slots;
    std::vector<int64_t> removed;
    std::vector<int32_t> sketch;
    bool complete = false;
    for (int64_t p = 0; p < parts.parts; ++p) {
      Tensor flag;
      TF_RETURN_IF_ERROR(ReadWhole(reader, parts, p, "complete", tensorflow::DT_BOOL, &flag));
      if (flag.NumElements() != 1) return errors::InvalidArgument(parts.Key(p, "complete"), " is not a scalar");
      complete |= flag.flat<bool>()(0);
    }
    for (int64_t p = 0; p < parts.parts; ++p) {
      if (FloorMod(p, g) != FloorMod(j, g)) continue;   // none of its keys or removals are this shard's
      Tensor keys, values, slots, freq, last, gone;
      TF_RETURN_IF_ERROR(ReadWhole(reader, parts, p, "keys", tensorflow::DT_INT64, &keys));
      TF_RETURN_IF_ERROR(ReadWhole(reader, parts, p, "values", tensorflow::DT_FLOAT, &values));
      TF_RETURN_IF_ERROR(ReadWhole(reader, parts, p, "slots", tensorflow::DT_FLOAT, &slots));
      TF_RETURN_IF_ERROR(ReadWhole(reader, parts, p, "freq", tensorflow::DT_INT64, &freq));
      TF_RETURN_IF_ERROR(ReadWhole(reader, parts, p, "last_step", tensorflow::DT_INT64, &last));
      TF_RETURN_IF_ERROR(ReadWhole(reader, parts, p, "removed", tensorflow::DT_INT64, &gone));
      const int64_t n = keys.NumElements();
      const int64_t* k = keys.flat<int64_t>().data();
      const float* v = values.flat<float>().data();
      const float* sl = slots.flat<float>().data();
      for (int64_t r = 0; r < n; ++r) {
        if (!parts.legacy && FloorMod(k[r], parts.parts) != p) {
          return errors::DataLoss("part ", p, " of ", parts.parts, " holds key ", k[r], ", which is not its own");
        }
        if (FloorMod(k[r], m) != j) continue;
        snap.keys.push_back(k[r]);
        snap.values.insert(snap.values.end(), v + r * snap.dim, v + (r + 1) * snap.dim);
        if (slot_floats > 0) snap.slots.insert(snap.slots.end(), sl + r * slot_floats, sl + (r + 1) * slot_floats);
        snap.freq.push_back(freq.flat<int64_t>()(r));
        snap.last_step.push_back(last.flat<int64_t>()(r));
      }
      const int64_t* rk = gone.flat<int64_t>().data();
      for (int64_t r = 0; r < gone.NumElements(); ++r) {
        if (FloorMod(rk[r], m) == j) removed.push_back(rk[r]);
      }
    }
    if (table.admission_size() > 0) {
      std::vector<int64_t> mine;   // the parts that can hold this shard's keys
      for (int64_t p = 0; p < parts.parts; ++p) {
        if (FloorMod(p, g) == FloorMod(j, g)) mine.push_back(p);
      }
      TF_RETURN_IF_ERROR(MaxSketch(reader, parts, mine, &sketch));
    }
    std::string error;
    if (!core::EmbeddingTable::AdmissionSizeFits(static_cast<int64_t>(sketch.size()), &error)) {
      return errors::InvalidArgument(error);   // before anything changes
    }
    if (!core::TableSnapshots(table).ImportDelta(snap, removed, complete, &error)) {
      return errors::InvalidArgument(error);
    }
    if (!sketch.empty() && !table.ImportAdmission(sketch.data(), static_cast<int64_t>(sketch.size()), &error)) {
      return errors::InvalidArgument(error);
    }
    return tensorflow::OkStatus();
  }

  std::string name_;
};

// Column `column` of table (or delta) `table_name` of a checkpoint, its parts concatenated:
// what a stock table, whose rows sit in one process anyway, is filled from.
class ReadColumnOp : public OpKernel {
 public:
  explicit ReadColumnOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_name", &name_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("column", &column_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dtype", &dtype_));
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& prefix_t = ctx->input(0);
    OP_REQUIRES(ctx, tensorflow::TensorShapeUtils::IsScalar(prefix_t.shape()),
                errors::InvalidArgument(type_string(), ": prefix must be a scalar"));
    const std::string prefix(prefix_t.scalar<tensorflow::tstring>()());
    tensorflow::BundleReader reader(tensorflow::Env::Default(), prefix);
    OP_REQUIRES_OK(ctx, reader.status());
    TableParts parts;
    Status found = ReadTableParts(reader, name_, -1, &parts);
    OP_REQUIRES(ctx, found.ok(), Status(found.code(), "checkpoint " + prefix + ": table '" + name_ + "' " +
                                                          std::string(found.message())));
    std::vector<Tensor> pieces(parts.parts);
    int64_t n = 0;
    for (int64_t p = 0; p < parts.parts; ++p) {
      OP_REQUIRES_OK(ctx, reader.Lookup(parts.Key(p, column_), &pieces[p]));
      if (pieces[p].dims() == 0) {   // a scalar per part (complete): one element each
        Tensor one(pieces[p].dtype(), TensorShape({1}));
        OP_REQUIRES(ctx, one.CopyFrom(pieces[p], TensorShape({1})), errors::Internal("reshape"));
        pieces[p] = one;
      }
      OP_REQUIRES(ctx, pieces[p].dtype() == dtype_ && pieces[p].dims() == pieces[0].dims(),
                  errors::InvalidArgument(parts.Key(p, column_), " is not a ", tensorflow::DataTypeString(dtype_),
                                          " tensor like the other parts"));
      n += pieces[p].dim_size(0);
    }
    TensorShape shape = pieces[0].shape();
    shape.set_dim(0, n);
    OP_REQUIRES(ctx, shape.dims() <= 2, errors::InvalidArgument(name_, ": ", column_, " has rank ", shape.dims()));
    if (shape.dims() == 2) {   // an empty part may have saved another width
      for (const Tensor& t : pieces) {
        if (t.dim_size(0) > 0) shape.set_dim(1, t.dim_size(1));
      }
    }
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, shape, &out));
    char* dst = const_cast<char*>(out->tensor_data().data());
    for (const Tensor& t : pieces) {
      if (t.NumElements() == 0) continue;
      OP_REQUIRES(ctx, t.dims() == 1 || (t.dims() == 2 && t.dim_size(1) == shape.dim_size(1)),
                  errors::InvalidArgument(name_, ": the parts of ", column_, " have different widths"));
      std::memcpy(dst, t.tensor_data().data(), t.tensor_data().size());
      dst += t.tensor_data().size();
    }
  }

 private:
  std::string name_, column_;
  tensorflow::DataType dtype_;
};

REGISTER_KERNEL_BUILDER(Name("TfpsTableRestoreStage").Device(tensorflow::DEVICE_CPU), TableRestoreStageOp);
REGISTER_KERNEL_BUILDER(Name("TfpsTableRestoreCommit").Device(tensorflow::DEVICE_CPU), TableRestoreCommitOp);
REGISTER_KERNEL_BUILDER(Name("TfpsTableApplyDelta").Device(tensorflow::DEVICE_CPU), TableApplyDeltaOp);
REGISTER_KERNEL_BUILDER(Name("TfpsReadColumn").Device(tensorflow::DEVICE_CPU), ReadColumnOp);

}  // namespace
}  // namespace tfps

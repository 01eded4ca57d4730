// TfpsTableRows: every row of one table at a cut (a checkpoint and the deltas after it), read
// straight from the bundles, for an export: the checkpoint's parts (or the last complete delta's)
// are streamed in slices, twice (keys only, to count; then every column), and the later deltas'
// changes are held in an overlay (their rows, by key). What is held whole is the outputs -- one
// copy of the table's exported bytes -- and the deltas' rows.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/checkpoint_parts.h"
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

// The admission sketch of a checkpoint's or delta's parts: their element-wise max.
Status Sketch(tensorflow::BundleReader& reader, const TableParts& parts, std::vector<int32_t>* out) {
  std::vector<int64_t> all(parts.parts);
  for (int64_t p = 0; p < parts.parts; ++p) all[p] = p;
  return MaxSketch(reader, parts, all, out);
}

// The rows the deltas after the base change: a key's latest row, or its removal.
struct Overlay {
  std::unordered_map<int64_t, int64_t> at;   // key -> index in the vectors below
  std::vector<int64_t> keys, freq, last_step;
  std::vector<float> values, slots;
  std::vector<char> live;
  int64_t live_count = 0;

  void Remove(int64_t key) {
    auto it = at.find(key);
    if (it == at.end()) {
      at.emplace(key, static_cast<int64_t>(keys.size()));
      keys.push_back(key);
      live.push_back(0);
      Grow();
    } else if (live[it->second]) {
      live[it->second] = 0;
      --live_count;
    }
  }
  // Row r of a delta part's columns (slots only when slot_floats > 0).
  void Put(int64_t key, const float* value, int64_t dim, const float* slot, int64_t slot_floats, int64_t f,
           int64_t l) {
    auto it = at.find(key);
    int64_t i;
    if (it == at.end()) {
      i = static_cast<int64_t>(keys.size());
      at.emplace(key, i);
      keys.push_back(key);
      live.push_back(0);
      Grow();
    } else {
      i = it->second;
    }
    if (!live[i]) ++live_count;
    live[i] = 1;
    std::memcpy(&values[i * dim_], value, sizeof(float) * dim);
    if (slot_floats > 0) std::memcpy(&slots[i * slot_floats_], slot, sizeof(float) * slot_floats);
    freq[i] = f;
    last_step[i] = l;
  }
  void Shape(int64_t dim, int64_t slot_floats) { dim_ = dim, slot_floats_ = slot_floats; }

 private:
  void Grow() {
    values.resize(keys.size() * dim_);
    slots.resize(keys.size() * slot_floats_);
    freq.resize(keys.size());
    last_step.resize(keys.size());
  }
  int64_t dim_ = 0, slot_floats_ = 0;
};

class TableRowsOp : public OpKernel {
 public:
  explicit TableRowsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_name", &name_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dim", &dim_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("pad_rows", &pad_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("with_state", &with_state_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("slice_bytes", &slice_bytes_));
    OP_REQUIRES(ctx, dim_ > 0 && slice_bytes_ > 0 && pad_ >= 0 && pad_ <= (int64_t{1} << 20),
                errors::InvalidArgument(type_string(), ": dim and slice_bytes must be > 0 and pad_rows in [0, 2^20]"));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& checkpoint = ctx->input(0);
    const Tensor& deltas = ctx->input(1);
    OP_REQUIRES(ctx, tensorflow::TensorShapeUtils::IsScalar(checkpoint.shape()) && deltas.dims() == 1,
                errors::InvalidArgument(type_string(), ": checkpoint must be a scalar and deltas a vector"));
    std::vector<std::string> chain;
    for (int64_t i = 0; i < deltas.NumElements(); ++i) chain.emplace_back(deltas.flat<tensorflow::tstring>()(i));
    const std::string prefix(checkpoint.scalar<tensorflow::tstring>()());
    Status s = Rows(ctx, prefix, chain);
    if (!s.ok()) {
      ctx->SetStatus(Status(s.code(), "rows of table '" + name_ + "' at checkpoint " + prefix +
                                          (chain.empty() ? "" : " and " + std::to_string(chain.size()) + " deltas") +
                                          ": " + std::string(s.message())));
    }
  }

 private:
  Status Rows(OpKernelContext* ctx, const std::string& checkpoint, const std::vector<std::string>& chain) {
    tensorflow::Env* env = tensorflow::Env::Default();
    // The base: the checkpoint, or the last delta whose parts hold every row (complete).
    std::vector<std::unique_ptr<tensorflow::BundleReader>> readers;
    std::vector<TableParts> delta_parts(chain.size());
    int64_t base = -1;
    for (size_t d = 0; d < chain.size(); ++d) {
      readers.push_back(std::make_unique<tensorflow::BundleReader>(env, chain[d]));
      TF_RETURN_IF_ERROR(readers[d]->status());
      Status found = ReadTableParts(*readers[d], name_ + "-delta", dim_, &delta_parts[d]);
      if (!found.ok()) {
        return Status(found.code(),
                      "delta " + chain[d] + ": table '" + name_ + "-delta' " + std::string(found.message()));
      }
      for (int64_t p = 0; p < delta_parts[d].parts; ++p) {
        Tensor flag;
        TF_RETURN_IF_ERROR(ReadWhole(*readers[d], delta_parts[d], p, "complete", tensorflow::DT_BOOL, &flag));
        if (flag.NumElements() != 1) {
          return errors::InvalidArgument(delta_parts[d].Key(p, "complete"), " is not a scalar");
        }
        if (flag.flat<bool>()(0)) base = static_cast<int64_t>(d);
      }
    }
    std::unique_ptr<tensorflow::BundleReader> own;
    tensorflow::BundleReader* reader;
    std::string base_prefix;
    TableParts parts;
    if (base < 0) {
      own = std::make_unique<tensorflow::BundleReader>(env, checkpoint);
      TF_RETURN_IF_ERROR(own->status());
      reader = own.get();
      base_prefix = checkpoint;
      Status found = ReadTableParts(*reader, name_, dim_, &parts);
      if (!found.ok()) return Status(found.code(), "table '" + name_ + "' " + std::string(found.message()));
    } else {
      reader = readers[base].get();
      base_prefix = chain[base];
      parts = delta_parts[base];
    }
    // The optimizer slots of the rows: the base's, or -- a base saved before the optimizer's first
    // apply has none -- those of the first delta rows after it (as a restore gives the table
    // slots then, each base row's set to slot_init).
    int64_t num_slots = parts.num_slots;
    std::vector<float> slot_init = parts.slot_init;
    for (size_t d = base + 1; with_state_ && d < chain.size(); ++d) {
      const TableParts& dp = delta_parts[d];
      bool rows = false;
      for (int64_t n : dp.rows) rows |= n > 0;
      if (!rows || dp.num_slots == num_slots) continue;
      if (num_slots != 0) {
        return errors::InvalidArgument("delta ", chain[d], " has rows of ", dp.num_slots, " optimizer slots, the rows "
                                       "before it ", num_slots);
      }
      num_slots = dp.num_slots;
      slot_init = dp.slot_init;
    }
    const int64_t slot_floats = with_state_ ? dim_ * num_slots : 0;
    const int64_t base_slot_floats = with_state_ ? dim_ * parts.num_slots : 0;   // what the base's columns hold
    std::vector<float> fresh_slots(slot_floats);   // a base row's slots when the base has none
    for (int64_t i = 0; i < slot_floats; ++i) fresh_slots[i] = slot_init[i / dim_];
    std::vector<int32_t> admission;
    if (with_state_) TF_RETURN_IF_ERROR(Sketch(*reader, parts, &admission));

    // The deltas after the base, in order: each one's removals, then its rows.
    Overlay overlay;
    overlay.Shape(dim_, slot_floats);
    for (size_t d = base + 1; d < chain.size(); ++d) {
      const TableParts& dp = delta_parts[d];
      for (int64_t p = 0; p < dp.parts; ++p) {
        Tensor gone;
        TF_RETURN_IF_ERROR(ReadWhole(*readers[d], dp, p, "removed", tensorflow::DT_INT64, &gone));
        for (int64_t r = 0; r < gone.NumElements(); ++r) overlay.Remove(gone.flat<int64_t>()(r));
      }
      for (int64_t p = 0; p < dp.parts; ++p) {
        Tensor keys, values, slots, freq, last;
        TF_RETURN_IF_ERROR(ReadWhole(*readers[d], dp, p, "keys", tensorflow::DT_INT64, &keys));
        TF_RETURN_IF_ERROR(ReadWhole(*readers[d], dp, p, "values", tensorflow::DT_FLOAT, &values));
        TF_RETURN_IF_ERROR(ReadWhole(*readers[d], dp, p, "slots", tensorflow::DT_FLOAT, &slots));
        TF_RETURN_IF_ERROR(ReadWhole(*readers[d], dp, p, "freq", tensorflow::DT_INT64, &freq));
        TF_RETURN_IF_ERROR(ReadWhole(*readers[d], dp, p, "last_step", tensorflow::DT_INT64, &last));
        const int64_t n = keys.NumElements();
        if (values.NumElements() != n * dim_ || freq.NumElements() != n || last.NumElements() != n ||
            (slot_floats > 0 && slots.NumElements() != n * slot_floats)) {
          return errors::DataLoss("delta ", chain[d], ": the columns of ", dp.Key(p, "keys"), " disagree in length");
        }
        const int64_t* k = keys.flat<int64_t>().data();
        for (int64_t r = 0; r < n; ++r) {
          if (!dp.legacy && FloorMod(k[r], dp.parts) != p) {
            return errors::DataLoss("delta ", chain[d], ": part ", p, " of ", dp.parts, " holds key ", k[r],
                                    ", which is not its own");
          }
          overlay.Put(k[r], values.flat<float>().data() + r * dim_, dim_,
                      slot_floats > 0 ? slots.flat<float>().data() + r * slot_floats : nullptr, slot_floats,
                      freq.flat<int64_t>()(r), last.flat<int64_t>()(r));
        }
      }
      if (with_state_) {
        std::vector<int32_t> sketch;
        TF_RETURN_IF_ERROR(Sketch(*readers[d], dp, &sketch));
        if (!sketch.empty()) admission.swap(sketch);   // a delta's sketch replaces the one before
      }
    }

    int files = 0;
    TF_RETURN_IF_ERROR(DataFileCount(*reader, &files));
    // Pass 1: the base's keys, to count the rows the overlay replaces or removes.
    int64_t base_rows = 0, replaced = 0;
    for (int64_t p = 0; p < parts.parts; ++p) base_rows += parts.rows[p];
    if (!overlay.at.empty()) {
      std::vector<int64_t> buffer(std::max<int64_t>(1, slice_bytes_ / 8));
      for (int64_t p = 0; p < parts.parts; ++p) {
        std::unique_ptr<EntryReader> column;
        TF_RETURN_IF_ERROR(EntryReader::OpenKey(env, base_prefix, files, *reader, parts.Key(p, "keys"), &column));
        for (int64_t at = 0; at < parts.rows[p];) {
          const int64_t c = std::min<int64_t>(parts.rows[p] - at, static_cast<int64_t>(buffer.size()));
          TF_RETURN_IF_ERROR(column->Read(reinterpret_cast<char*>(buffer.data()), c * 8));
          for (int64_t r = 0; r < c; ++r) replaced += overlay.at.count(buffer[r]);
          at += c;
        }
        TF_RETURN_IF_ERROR(column->Finish());
      }
    }
    const int64_t n = base_rows - replaced + overlay.live_count;
    const int64_t state_rows = with_state_ ? n : 0;
    Tensor *keys_out, *values_out, *slots_out, *freq_out, *last_out, *admission_out, *init_out;
    TF_RETURN_IF_ERROR(ctx->allocate_output(0, TensorShape({n}), &keys_out));
    TensorShape values_shape, slots_shape;   // sizes from the files: checked, never a CHECK failure
    TF_RETURN_IF_ERROR(TensorShape::BuildTensorShape({pad_ + n, dim_}, &values_shape));
    TF_RETURN_IF_ERROR(TensorShape::BuildTensorShape({state_rows, slot_floats}, &slots_shape));
    TF_RETURN_IF_ERROR(ctx->allocate_output(1, values_shape, &values_out));
    TF_RETURN_IF_ERROR(ctx->allocate_output(2, slots_shape, &slots_out));
    TF_RETURN_IF_ERROR(ctx->allocate_output(3, TensorShape({state_rows}), &freq_out));
    TF_RETURN_IF_ERROR(ctx->allocate_output(4, TensorShape({state_rows}), &last_out));
    TF_RETURN_IF_ERROR(ctx->allocate_output(5, TensorShape({static_cast<int64_t>(admission.size())}), &admission_out));
    TF_RETURN_IF_ERROR(ctx->allocate_output(6, TensorShape({static_cast<int64_t>(slot_init.size())}), &init_out));
    std::copy(admission.begin(), admission.end(), admission_out->flat<int32_t>().data());
    std::copy(slot_init.begin(), slot_init.end(), init_out->flat<float>().data());
    int64_t* ko = keys_out->flat<int64_t>().data();
    float* vo = values_out->flat<float>().data();
    std::fill(vo, vo + pad_ * dim_, 0.0f);
    vo += pad_ * dim_;
    float* so = slots_out->flat<float>().data();
    int64_t* fo = freq_out->flat<int64_t>().data();
    int64_t* lo = last_out->flat<int64_t>().data();

    // Pass 2: the base's rows the overlay leaves, in slices, then the overlay's live rows.
    int64_t o = 0;
    const int64_t row_bytes = 8 + dim_ * 4 + base_slot_floats * 4 + (with_state_ ? 16 : 0);
    const int64_t chunk = std::max<int64_t>(1, slice_bytes_ / row_bytes);
    std::vector<int64_t> k(chunk), f(with_state_ ? chunk : 0), l(with_state_ ? chunk : 0);
    std::vector<float> v(chunk * dim_), sl(chunk * base_slot_floats);
    for (int64_t p = 0; p < parts.parts; ++p) {
      const int64_t rows = parts.rows[p];
      std::unique_ptr<EntryReader> kc, vc, sc, fc, lc;
      TF_RETURN_IF_ERROR(EntryReader::OpenKey(env, base_prefix, files, *reader, parts.Key(p, "keys"), &kc));
      TF_RETURN_IF_ERROR(EntryReader::OpenKey(env, base_prefix, files, *reader, parts.Key(p, "values"), &vc));
      if (with_state_) {
        TF_RETURN_IF_ERROR(EntryReader::OpenKey(env, base_prefix, files, *reader, parts.Key(p, "slots"), &sc));
        TF_RETURN_IF_ERROR(EntryReader::OpenKey(env, base_prefix, files, *reader, parts.Key(p, "freq"), &fc));
        TF_RETURN_IF_ERROR(EntryReader::OpenKey(env, base_prefix, files, *reader, parts.Key(p, "last_step"), &lc));
      }
      for (int64_t at = 0; at < rows;) {
        const int64_t c = std::min(rows - at, chunk);
        TF_RETURN_IF_ERROR(kc->Read(reinterpret_cast<char*>(k.data()), c * 8));
        TF_RETURN_IF_ERROR(vc->Read(reinterpret_cast<char*>(v.data()), c * dim_ * 4));
        if (with_state_) {
          TF_RETURN_IF_ERROR(sc->Read(reinterpret_cast<char*>(sl.data()), c * base_slot_floats * 4));
          TF_RETURN_IF_ERROR(fc->Read(reinterpret_cast<char*>(f.data()), c * 8));
          TF_RETURN_IF_ERROR(lc->Read(reinterpret_cast<char*>(l.data()), c * 8));
        }
        for (int64_t r = 0; r < c; ++r) {
          if (!parts.legacy && FloorMod(k[r], parts.parts) != p) {
            return errors::DataLoss("part ", p, " of ", parts.parts, " holds key ", k[r], ", which is not its own");
          }
          if (!overlay.at.empty() && overlay.at.count(k[r])) continue;
          if (o >= n) return errors::DataLoss("more rows than the first pass counted");
          ko[o] = k[r];
          std::memcpy(vo + o * dim_, &v[r * dim_], sizeof(float) * dim_);
          if (with_state_) {
            if (slot_floats > 0) {
              const float* from = base_slot_floats > 0 ? &sl[r * base_slot_floats] : fresh_slots.data();
              std::memcpy(so + o * slot_floats, from, sizeof(float) * slot_floats);
            }
            fo[o] = f[r];
            lo[o] = l[r];
          }
          ++o;
        }
        at += c;
      }
      TF_RETURN_IF_ERROR(kc->Finish());
      TF_RETURN_IF_ERROR(vc->Finish());
      if (with_state_) {
        TF_RETURN_IF_ERROR(sc->Finish());
        TF_RETURN_IF_ERROR(fc->Finish());
        TF_RETURN_IF_ERROR(lc->Finish());
      }
    }
    for (size_t i = 0; i < overlay.keys.size(); ++i) {
      if (!overlay.live[i]) continue;
      if (o >= n) return errors::DataLoss("more rows than the first pass counted");
      ko[o] = overlay.keys[i];
      std::memcpy(vo + o * dim_, &overlay.values[i * dim_], sizeof(float) * dim_);
      if (with_state_) {
        if (slot_floats > 0) {
          std::memcpy(so + o * slot_floats, &overlay.slots[i * slot_floats], sizeof(float) * slot_floats);
        }
        fo[o] = overlay.freq[i];
        lo[o] = overlay.last_step[i];
      }
      ++o;
    }
    if (o != n) return errors::DataLoss("the rows changed between the two passes (", o, " of ", n, ")");
    return tensorflow::OkStatus();
  }

  std::string name_;
  int64_t dim_ = 0, pad_ = 0, slice_bytes_ = 0;
  bool with_state_ = true;
};

REGISTER_KERNEL_BUILDER(Name("TfpsTableRows").Device(tensorflow::DEVICE_CPU), TableRowsOp);

}  // namespace
}  // namespace tfps

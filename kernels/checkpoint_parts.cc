#include "kernels/checkpoint_parts.h"

#include <algorithm>
#include <vector>

#include "kernels/core/crc32c.h"
#include "tensorflow/core/framework/tensor.h"

namespace tfps {

using tensorflow::BundleEntryProto;
using tensorflow::Status;
using tensorflow::Tensor;
using tensorflow::TensorShape;
namespace errors = tensorflow::errors;

std::string TableParts::Key(int64_t p, const std::string& column) const {
  if (legacy) return name + "-" + column;
  return name + "-part" + std::to_string(p) + "-" + column;
}

bool FindEntry(tensorflow::BundleReader& reader, const std::string& key, BundleEntryProto* entry) {
  reader.Seek(key);
  if (!reader.Valid() || std::string(reader.key()) != key) return false;
  return entry->ParseFromArray(reader.value().data(), static_cast<int>(reader.value().size()));
}

Status DataFileCount(tensorflow::BundleReader& reader, int* count) {
  reader.Seek(tensorflow::kHeaderEntryKey);
  tensorflow::BundleHeaderProto header;
  if (!reader.Valid() || !reader.key().empty() ||
      !header.ParseFromArray(reader.value().data(), static_cast<int>(reader.value().size()))) {
    return errors::DataLoss("the checkpoint's index has no header");
  }
  *count = header.num_shards();
  return tensorflow::OkStatus();
}

namespace {

TensorShape ShapeOf(const BundleEntryProto& e) { return TensorShape(e.shape()); }

std::string Describe(const TensorShape& s) { return s.DebugString(); }

}  // namespace

Status ReadTableParts(tensorflow::BundleReader& reader, const std::string& name, int64_t dim, TableParts* out) {
  *out = TableParts();
  out->name = name;
  BundleEntryProto e;
  if (FindEntry(reader, name + "-parts", &e)) {
    Tensor parts;
    TF_RETURN_IF_ERROR(reader.Lookup(name + "-parts", &parts));
    if (parts.dtype() != tensorflow::DT_INT64 || parts.NumElements() != 1 || parts.flat<int64_t>()(0) < 1) {
      return errors::InvalidArgument("has a part count that is not a positive int64 scalar");
    }
    out->parts = parts.flat<int64_t>()(0);
  } else if (FindEntry(reader, name + "-keys", &e)) {
    out->legacy = true;
    out->parts = 1;
  } else {
    return errors::NotFound("is not in the checkpoint");
  }
  if (!FindEntry(reader, name + "-slot_init", &e)) {
    return errors::InvalidArgument("lacks slot_init (a partly written checkpoint?)");
  }
  Tensor slot_init;
  TF_RETURN_IF_ERROR(reader.Lookup(name + "-slot_init", &slot_init));
  if (slot_init.dtype() != tensorflow::DT_FLOAT || slot_init.dims() != 1 || slot_init.dim_size(0) > 64) {
    return errors::InvalidArgument("has a slot_init that is not a float vector");
  }
  out->num_slots = slot_init.dim_size(0);
  out->slot_init.assign(slot_init.flat<float>().data(), slot_init.flat<float>().data() + out->num_slots);
  out->dim = dim;
  const char* columns[5] = {"keys", "values", "slots", "freq", "last_step"};
  const tensorflow::DataType dtypes[5] = {tensorflow::DT_INT64, tensorflow::DT_FLOAT, tensorflow::DT_FLOAT,
                                          tensorflow::DT_INT64, tensorflow::DT_INT64};
  for (int64_t p = 0; p < out->parts; ++p) {
    TensorShape shape[5];
    for (int c = 0; c < 5; ++c) {
      const std::string key = out->Key(p, columns[c]);
      if (!FindEntry(reader, key, &e)) {
        return errors::InvalidArgument("lacks ", columns[c], out->legacy ? "" : " of part " + std::to_string(p),
                                       " (a partly written checkpoint?)");
      }
      if (e.slices_size() > 0) return errors::InvalidArgument("has ", key, " saved in slices");
      if (e.dtype() != dtypes[c]) {
        return errors::InvalidArgument("has ", key, " of dtype ", tensorflow::DataTypeString(e.dtype()), ", not ",
                                       tensorflow::DataTypeString(dtypes[c]));
      }
      if (!TensorShape::IsValid(e.shape())) return errors::InvalidArgument("has ", key, " of an invalid shape");
      shape[c] = ShapeOf(e);
      if (e.size() != shape[c].num_elements() * static_cast<int64_t>(tensorflow::DataTypeSize(dtypes[c]))) {
        return errors::DataLoss("has ", key, " of ", e.size(), " bytes for its shape ", shape[c].DebugString());
      }
    }
    if (shape[1].dims() != 2) return errors::InvalidArgument("has values of shape ", Describe(shape[1]));
    if (out->dim < 0) out->dim = shape[1].dim_size(1);
    if (shape[1].dim_size(1) != out->dim) {
      return errors::InvalidArgument("has values of shape ", Describe(shape[1]), ", the model asks for dim ", out->dim);
    }
    const int64_t n = shape[0].dims() == 1 ? shape[0].dim_size(0) : -1;
    const bool slots_fit = shape[2].dims() == 2 && shape[2].dim_size(0) == n &&
                           (shape[2].dim_size(1) == out->num_slots * out->dim || n == 0);
    if (n < 0 || shape[1].dim_size(0) != n || !slots_fit || shape[3] != TensorShape({n}) ||
        shape[4] != TensorShape({n})) {
      return errors::InvalidArgument("has parts of inconsistent sizes",
                                     out->legacy ? "" : " (part " + std::to_string(p) + ")");
    }
    out->rows.push_back(n);
  }
  return tensorflow::OkStatus();
}

Status EntryReader::Open(tensorflow::Env* env, const std::string& prefix, int num_data_files,
                         const BundleEntryProto& entry, const std::string& key, std::unique_ptr<EntryReader>* out) {
  auto r = std::unique_ptr<EntryReader>(new EntryReader());
  r->key_ = key;
  r->path_ = tensorflow::DataFilename(prefix, entry.shard_id(), num_data_files);
  TF_RETURN_IF_ERROR(env->NewRandomAccessFile(r->path_, &r->file_));
  r->begin_ = entry.offset();
  r->size_ = entry.size();
  if (r->begin_ < 0 || r->size_ < 0) {
    return errors::DataLoss("checkpoint tensor ", key, " has a negative offset or size in the index");
  }
  r->want_ = core::crc32c::Unmask(entry.crc32c());
  *out = std::move(r);
  return tensorflow::OkStatus();
}

Status EntryReader::Read(char* dst, int64_t bytes) {
  if (bytes < 0 || at_ + bytes > size_) {
    return errors::InvalidArgument("checkpoint tensor ", key_, ": read past its ", size_, " bytes");
  }
  int64_t done = 0;
  while (done < bytes) {
    tensorflow::StringPiece got;
    const size_t want = static_cast<size_t>(std::min<int64_t>(bytes - done, int64_t{1} << 30));
    Status s = file_->Read(static_cast<uint64_t>(begin_ + at_ + done), want, &got, dst + done);
    if (got.size() < want) {
      return errors::DataLoss("checkpoint tensor ", key_, ": ", path_, " ends early (", s.ToString(), ")");
    }
    if (got.data() != dst + done) std::memmove(dst + done, got.data(), got.size());
    done += static_cast<int64_t>(got.size());
  }
  crc_ = core::crc32c::Extend(crc_, dst, static_cast<size_t>(bytes));
  at_ += bytes;
  return tensorflow::OkStatus();
}

Status EntryReader::Finish() {
  std::vector<char> rest(static_cast<size_t>(std::max<int64_t>(0, std::min<int64_t>(size_ - at_, int64_t{8} << 20))));
  while (at_ < size_) {
    const int64_t n = std::min<int64_t>(size_ - at_, static_cast<int64_t>(rest.size()));
    TF_RETURN_IF_ERROR(Read(rest.data(), n));
  }
  if (crc_ != want_) {
    return errors::DataLoss("checkpoint tensor ", key_, " in ", path_, " is damaged (its checksum does not match)");
  }
  return tensorflow::OkStatus();
}

Status EntryReader::OpenKey(tensorflow::Env* env, const std::string& prefix, int num_data_files,
                            tensorflow::BundleReader& reader, const std::string& key,
                            std::unique_ptr<EntryReader>* out) {
  BundleEntryProto e;
  if (!FindEntry(reader, key, &e)) return errors::InvalidArgument("checkpoint tensor ", key, " is gone");
  return Open(env, prefix, num_data_files, e, key, out);
}

Status ReadWhole(tensorflow::BundleReader& reader, const TableParts& parts, int64_t p, const std::string& column,
                 tensorflow::DataType dtype, Tensor* out) {
  TF_RETURN_IF_ERROR(reader.Lookup(parts.Key(p, column), out));
  if (out->dtype() != dtype) {
    return errors::InvalidArgument(parts.Key(p, column), " has dtype ", tensorflow::DataTypeString(out->dtype()));
  }
  return tensorflow::OkStatus();
}

Status MaxSketch(tensorflow::BundleReader& reader, const TableParts& parts, const std::vector<int64_t>& ps,
                 std::vector<int32_t>* out) {
  out->clear();
  for (int64_t p : ps) {
    if (!reader.Contains(parts.Key(p, "admission"))) continue;
    Tensor t;
    TF_RETURN_IF_ERROR(ReadWhole(reader, parts, p, "admission", tensorflow::DT_INT32, &t));
    if (t.dims() != 1) return errors::InvalidArgument(parts.Key(p, "admission"), " is not a vector");
    if (t.NumElements() == 0) continue;
    const int32_t* c = t.flat<int32_t>().data();
    if (out->empty()) {
      out->assign(c, c + t.NumElements());
    } else if (static_cast<int64_t>(out->size()) == t.NumElements()) {
      for (size_t i = 0; i < out->size(); ++i) (*out)[i] = std::max((*out)[i], c[i]);
    } else {
      return errors::InvalidArgument("the parts' admission sketches have different sizes");
    }
  }
  return tensorflow::OkStatus();
}

}  // namespace tfps

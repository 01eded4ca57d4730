// A table's place in a checkpoint bundle, as tfps/embedding/saveable.py writes it, read with
// TF's own BundleReader (index) and the bundle's data files (raw rows, in slices):
//
//   NAME-parts      int64 []          P, the shard count that saved it (one part per shard)
//   NAME-slot_init  float [k]         the optimizer slots' initial value
//   NAME-part{p}-keys [n_p], -values [n_p, dim], -slots [n_p, k * dim], -freq [n_p],
//               -last_step [n_p], -admission [S]   part p: the rows of the keys with
//                                                  floormod(key, P) == p, saved by that shard
//
// A checkpoint of the layout before parts (NAME-keys, NAME-values, ..., no NAME-parts) reads as
// one part. The restore kernels and TfpsCheckTables read the layout through ReadTableParts;
// Python reads it through tfps/embedding/layout.py.
#ifndef TFPS_KERNELS_CHECKPOINT_PARTS_H_
#define TFPS_KERNELS_CHECKPOINT_PARTS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/platform/env.h"
#include "tensorflow/core/protobuf/tensor_bundle.pb.h"
#include "tensorflow/core/util/tensor_bundle/naming.h"
#include "tensorflow/core/util/tensor_bundle/tensor_bundle.h"

namespace tfps {

struct TableParts {
  std::string name;
  bool legacy = false;          // NAME-keys, ...: one part
  int64_t parts = 0;            // P
  int64_t dim = 0;
  int64_t num_slots = 0;        // k
  std::vector<float> slot_init; // [k]
  std::vector<int64_t> rows;    // n_p
  // The bundle key of part p's `column` (keys, values, slots, freq, last_step, admission).
  std::string Key(int64_t p, const std::string& column) const;
};

// The bundle's entry of `key` (false when there is none).
bool FindEntry(tensorflow::BundleReader& reader, const std::string& key, tensorflow::BundleEntryProto* entry);

// Reads table `name`'s layout from the bundle's index (and its two small tensors), checking that
// every part is there with consistent shapes and dim `dim` (-1: any). On failure, a message
// completing "table 'NAME' ..." (e.g. "is not in the checkpoint") -- the caller adds the rest.
tensorflow::Status ReadTableParts(tensorflow::BundleReader& reader, const std::string& name, int64_t dim,
                                  TableParts* out);

// Reads one bundle entry's raw bytes in order, in pieces, from its data file, and checks its
// CRC-32C at the end (Finish): what a restore of a table larger than memory needs.
class EntryReader {
 public:
  static tensorflow::Status Open(tensorflow::Env* env, const std::string& prefix, int num_data_files,
                                 const tensorflow::BundleEntryProto& entry, const std::string& key,
                                 std::unique_ptr<EntryReader>* out);
  // Open of the entry named `key` in the bundle `reader` reads (InvalidArgument when it has none).
  static tensorflow::Status OpenKey(tensorflow::Env* env, const std::string& prefix, int num_data_files,
                                    tensorflow::BundleReader& reader, const std::string& key,
                                    std::unique_ptr<EntryReader>* out);
  // The next `bytes` bytes into dst (InvalidArgument past the entry's end, DataLoss on a short file).
  tensorflow::Status Read(char* dst, int64_t bytes);
  // Reads what is left (to check it) and compares the CRC: DataLoss naming the tensor otherwise.
  tensorflow::Status Finish();

 private:
  std::unique_ptr<tensorflow::RandomAccessFile> file_;
  std::string key_, path_;
  int64_t begin_ = 0, size_ = 0, at_ = 0;
  uint32_t crc_ = 0, want_ = 0;
};

// The number of data files of the bundle at `prefix` (its header).
tensorflow::Status DataFileCount(tensorflow::BundleReader& reader, int* count);

// floormod(key, m): the part among m parts (or the shard among m shards) that holds `key`.
inline int64_t FloorMod(int64_t key, int64_t m) {
  const int64_t r = key % m;
  return r < 0 ? r + m : r;
}

// Column `column` of part p, read whole (a delta's parts, a part's small tensors), checked to be
// of dtype `dtype`.
tensorflow::Status ReadWhole(tensorflow::BundleReader& reader, const TableParts& parts, int64_t p,
                             const std::string& column, tensorflow::DataType dtype, tensorflow::Tensor* out);

// The element-wise max of the admission sketches of the parts `ps` (a part without one, or with
// an empty one, adds nothing; empty when none has one): no key is under-counted.
tensorflow::Status MaxSketch(tensorflow::BundleReader& reader, const TableParts& parts,
                             const std::vector<int64_t>& ps, std::vector<int32_t>* out);

}  // namespace tfps

#endif  // TFPS_KERNELS_CHECKPOINT_PARTS_H_

// tfps._core: a pybind11 binding of the TF-free core (kernels/core/), for property-based tests
// against a Python model and for tools that need no TensorFlow graph. Thin: numpy arrays in,
// numpy arrays out, every size checked (ValueError) before the core sees a pointer. The GIL is
// released around core calls, so Python threads can drive one table concurrently.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/core/cdf_sampler.h"
#include "kernels/core/config.h"
#include "kernels/core/embedding_table.h"
#include "kernels/core/eviction.h"
#include "kernels/core/table_snapshots.h"
#include "kernels/core/unique.h"

namespace py = pybind11;
using tfps::core::EmbeddingTable;
using tfps::core::EvictionPolicies;
using tfps::core::EvictionRules;
using tfps::core::InitSpec;
using tfps::core::TableSnapshot;
using tfps::core::TableSnapshots;

namespace {

using Keys = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;
using Floats = py::array_t<float, py::array::c_style | py::array::forcecast>;

// Keys from an integer array of any width (a float or string array is a ValueError, as float
// ids are for the ops), as a contiguous int64 vector.
Keys AsKeys(const py::array& a, const char* what = "keys") {
  const char kind = a.dtype().kind();
  if (kind != 'i' && kind != 'u') {
    throw py::value_error(std::string(what) + " must be an integer array, got dtype " +
                          py::str(a.dtype()).cast<std::string>());
  }
  Keys keys = Keys::ensure(a);
  if (keys.ndim() != 1) throw py::value_error(std::string(what) + " must be a vector, got " + std::to_string(keys.ndim()) + " dims");
  return keys;
}

int64_t KeyCount(const Keys& keys) { return keys.shape(0); }

void CheckRows(const Floats& rows, int64_t n, int64_t width, const char* what) {
  if (rows.ndim() != 2 || rows.shape(0) != n || rows.shape(1) != width) {
    throw py::value_error(std::string(what) + " must be [" + std::to_string(n) + ", " + std::to_string(width) + "]");
  }
}

template <typename T>
py::array_t<T> ToArray(const std::vector<T>& v, std::vector<py::ssize_t> shape) {
  py::array_t<T> out(shape);
  std::copy(v.begin(), v.end(), out.mutable_data());
  return out;
}

py::dict SnapshotDict(const TableSnapshot& s) {
  const py::ssize_t n = static_cast<py::ssize_t>(s.keys.size());
  py::dict d;
  d["keys"] = ToArray(s.keys, {n});
  d["values"] = ToArray(s.values, {n, static_cast<py::ssize_t>(s.dim)});
  d["slots"] = ToArray(s.slots, {n, static_cast<py::ssize_t>(s.dim * s.num_slots)});
  d["freq"] = ToArray(s.freq, {n});
  d["last_step"] = ToArray(s.last_step, {n});
  d["slot_init"] = ToArray(s.slot_init, {static_cast<py::ssize_t>(s.num_slots)});
  return d;
}

std::unique_ptr<EmbeddingTable> MakeTable(int64_t dim, const std::string& initializer, float a, float b, int64_t seed,
                                          int64_t admit_min_count, int64_t sketch_width) {
  if (dim < 1 || dim > tfps::core::kMaxDim) {
    throw py::value_error("dim must be in [1, " + std::to_string(tfps::core::kMaxDim) + "], got " + std::to_string(dim));
  }
  if (admit_min_count < 1) throw py::value_error("admit_min_count must be >= 1");
  InitSpec spec;
  if (!tfps::core::ParseInitKind(initializer, &spec.kind)) throw py::value_error("unknown initializer " + initializer);
  spec.a = a;
  spec.b = b;
  spec.seed = seed;
  try {
    return std::make_unique<EmbeddingTable>(dim, spec, static_cast<uint32_t>(admit_min_count), sketch_width);
  } catch (const std::invalid_argument& e) {
    throw py::value_error(e.what());
  }
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "The TF-free tfps core: the concurrent hash table and fused unique+partition.";

  py::class_<EmbeddingTable>(m, "Table", R"doc(
int64 key -> float32 row [dim] (+ optimizer slots), as the TfpsTable ops hold it.

    t = tfps._core.Table(4, "constant", 0.5)
    rows = t.lookup(np.array([1, 2], np.int64))    # float32 [2, 4], inserts 1 and 2
)doc")
      .def(py::init(&MakeTable), py::arg("dim"), py::arg("initializer") = "zeros", py::arg("a") = 0.f,
           py::arg("b") = 0.f, py::arg("seed") = 0, py::arg("admit_min_count") = 1,
           py::arg("sketch_width") = tfps::core::kSketchWidth)
      .def_property_readonly("dim", &EmbeddingTable::dim)
      .def("size", &EmbeddingTable::size)
      .def("num_slots", &EmbeddingTable::num_slots)
      .def(
          "lookup",
          [](EmbeddingTable& t, const py::array& ids, bool insert) {
            const Keys keys = AsKeys(ids);
            const int64_t n = KeyCount(keys);
            py::array_t<float> out({static_cast<py::ssize_t>(n), static_cast<py::ssize_t>(t.dim())});
            float* dst = out.mutable_data();
            const int64_t* k = keys.data();
            py::gil_scoped_release release;
            t.Lookup(k, n, insert, false, dst);
            return out;
          },
          py::arg("keys"), py::arg("insert") = true, "keys int64 [N] -> float32 [N, dim].")
      .def(
          "assign",
          [](EmbeddingTable& t, const py::array& ids, const Floats& values) {
            const Keys keys = AsKeys(ids);
            const int64_t n = KeyCount(keys);
            CheckRows(values, n, t.dim(), "values");
            py::gil_scoped_release release;
            t.Assign(keys.data(), n, values.data());
          },
          py::arg("keys"), py::arg("values"))
      .def(
          "remove",
          [](EmbeddingTable& t, const py::array& ids) {
            const Keys keys = AsKeys(ids);
            const int64_t n = KeyCount(keys);
            py::gil_scoped_release release;
            return t.Remove(keys.data(), n);
          },
          py::arg("keys"), "Removes the keys present; returns how many.")
      .def(
          "apply_sgd",
          [](EmbeddingTable& t, const py::array& ids, const Floats& grads, float lr, int64_t step) {
            const Keys keys = AsKeys(ids);
            const int64_t n = KeyCount(keys);
            CheckRows(grads, n, t.dim(), "grads");
            const int64_t dim = t.dim();
            const float* g = grads.data();
            py::gil_scoped_release release;
            return t.Update(keys.data(), n, step, [&](int64_t i, float* row, uint32_t) {
              for (int64_t j = 0; j < dim; ++j) row[j] -= lr * g[i * dim + j];
            });
          },
          py::arg("keys"), py::arg("grads"), py::arg("lr"), py::arg("step"),
          "row -= lr * grad for the keys present (counts freq, sets last_step); returns how many.")
      .def(
          "ensure_slots",
          [](EmbeddingTable& t, const std::vector<float>& slot_init) {
            std::string error;
            if (!t.EnsureSlots(static_cast<int>(slot_init.size()), slot_init.data(), &error)) throw py::value_error(error);
          },
          py::arg("slot_init"))
      .def(
          "evict",
          [](EmbeddingTable& t, int64_t step, int64_t after_steps, int64_t min_freq, float l2_below, int64_t max_rows,
             bool lru) {
            // < 0: the rule is off.
            const EvictionPolicies policies(EvictionRules{after_steps, min_freq, max_rows, l2_below, lru});
            py::gil_scoped_release release;
            return t.Evict(policies.get(), step);
          },
          py::arg("step"), py::arg("after_steps") = -1, py::arg("min_freq") = -1, py::arg("l2_below") = -1.f,
          py::arg("max_rows") = -1, py::arg("lru") = false)
      .def("export",
           [](EmbeddingTable& t) {
             TableSnapshot s;
             {
               py::gil_scoped_release release;
               TableSnapshots(t).Export(&s);
             }
             return SnapshotDict(s);
           })
      .def(
          "import_",
          [](EmbeddingTable& t, const py::dict& d) {
            for (const char* part : {"keys", "values", "slots", "freq", "last_step", "slot_init"}) {
              if (!d.contains(part)) throw py::value_error(std::string("snapshot lacks '") + part + "'");
            }
            TableSnapshot s;
            const Keys keys = AsKeys(d["keys"].cast<py::array>());
            const int64_t n = KeyCount(keys);
            const Floats slot_init = d["slot_init"].cast<Floats>();
            s.dim = t.dim();
            s.num_slots = static_cast<int>(slot_init.size());
            const Floats values = d["values"].cast<Floats>(), slots = d["slots"].cast<Floats>();
            CheckRows(values, n, t.dim(), "values");
            CheckRows(slots, n, t.dim() * s.num_slots, "slots");
            const Keys freq = AsKeys(d["freq"].cast<py::array>(), "freq"),
                       last = AsKeys(d["last_step"].cast<py::array>(), "last_step");
            if (KeyCount(freq) != n || KeyCount(last) != n) throw py::value_error("freq and last_step must be [N]");
            s.keys.assign(keys.data(), keys.data() + n);
            s.values.assign(values.data(), values.data() + values.size());
            s.slots.assign(slots.data(), slots.data() + slots.size());
            s.freq.assign(freq.data(), freq.data() + n);
            s.last_step.assign(last.data(), last.data() + n);
            s.slot_init.assign(slot_init.data(), slot_init.data() + slot_init.size());
            std::string error;
            if (!TableSnapshots(t).Import(s, &error)) throw py::value_error(error);
          },
          py::arg("snapshot"), "Replaces the contents with an export() dict.")
      .def("stats", [](const EmbeddingTable& t) {
        const auto st = t.Stats();
        py::dict d;
        d["rows"] = st.rows;
        d["bytes_reserved"] = st.bytes_reserved;
        d["bytes_in_use"] = st.bytes_in_use;
        d["row_bytes"] = st.row_bytes;
        d["pending"] = st.pending;
        d["removed_logged"] = st.removed_logged;
        d["index_bytes"] = st.index_bytes;
        d["arena_bytes"] = st.arena_bytes;
        d["side_bytes"] = st.side_bytes;
        return d;
      })
      .def(
          "set_prefetch",
          [](EmbeddingTable& t, const std::string& mode, int64_t min_shard_bytes) {
            using tfps::core::PrefetchMode;
            PrefetchMode m;
            if (mode == "off") m = PrefetchMode::kOff;
            else if (mode == "group") m = PrefetchMode::kGroup;
            else if (mode == "rolling") m = PrefetchMode::kRolling;
            else throw py::value_error("prefetch mode must be off, group or rolling, got '" + mode + "'");
            if (min_shard_bytes < 0) throw py::value_error("min_shard_bytes must be >= 0");
            static const char* const kNames[] = {"off", "group", "rolling"};
            return std::string(kNames[static_cast<int>(t.SetPrefetch(m, min_shard_bytes))]);
          },
          py::arg("mode"), py::arg("min_shard_bytes") = tfps::core::kPrefetchMinShardBytes,
          "Sets how this table prefetches on its batch paths (off | group | rolling; results never depend "
          "on it), from how many bytes of rows per index shard (tests give 0). Returns the mode it replaced.");

  py::class_<tfps::core::CdfSampler>(m, "CdfSampler",
                                     "Inverse-CDF sampling with a guide table (kernels/core/cdf_sampler.h).")
      .def(py::init([](const py::array_t<double, py::array::c_style | py::array::forcecast>& cdf) {
             if (cdf.ndim() != 1 || cdf.shape(0) == 0) throw py::value_error("cdf must be a non-empty vector");
             const double* c = cdf.data();
             std::vector<double> values(c, c + cdf.shape(0));
             for (size_t i = 0; i < values.size(); ++i) {
               if (!std::isfinite(values[i]) || (i > 0 && values[i] < values[i - 1])) {
                 throw py::value_error("cdf must be finite and non-decreasing; index " + std::to_string(i) + " is not");
               }
             }
             return std::make_unique<tfps::core::CdfSampler>(std::move(values));
           }),
           py::arg("cdf"))
      .def(
          "ranks",
          [](const tfps::core::CdfSampler& s, const py::array_t<double, py::array::c_style | py::array::forcecast>& u) {
            if (u.ndim() != 1) throw py::value_error("u must be a vector");
            py::array_t<int64_t> out(u.shape(0));
            const double* in = u.data();
            int64_t* o = out.mutable_data();
            const int64_t n = u.shape(0);
            {
              py::gil_scoped_release release;
              s.Ranks(in, n, o);
            }
            return out;
          },
          py::arg("u"), "float64 u [N] -> int64 [N]: numpy.searchsorted(cdf, u, side='right').");

  m.def(
      "unique_partition",
      [](const py::array& raw, int64_t num_partitions, const std::string& strategy) {
        const Keys ids = AsKeys(raw, "ids");
        const int64_t n = KeyCount(ids);
        if (num_partitions < 1 || num_partitions > tfps::core::kMaxPartitions) {
          throw py::value_error("num_partitions must be in [1, " + std::to_string(tfps::core::kMaxPartitions) +
                                "], got " + std::to_string(num_partitions));
        }
        if (strategy != "mod" && strategy != "hash") throw py::value_error("strategy must be mod or hash");
        py::array_t<int64_t> inverse(n);
        std::vector<int64_t> uniq, offsets;
        std::vector<int32_t> counts;
        int64_t* inv = inverse.mutable_data();
        const int64_t* k = ids.data();
        {
          py::gil_scoped_release release;
          tfps::core::UniquePartition<int64_t>(
              k, n, num_partitions,
              strategy == "hash" ? tfps::core::PartitionStrategy::kHash : tfps::core::PartitionStrategy::kMod, inv,
              &uniq, &counts, &offsets);
        }
        return py::make_tuple(ToArray(uniq, {static_cast<py::ssize_t>(uniq.size())}), inverse,
                              ToArray(offsets, {static_cast<py::ssize_t>(offsets.size())}));
      },
      py::arg("ids"), py::arg("num_partitions"), py::arg("strategy") = "mod",
      "ids int64 [N] -> (unique_ids [U], inverse int64 [N], offsets [P + 1]), as tfps.ops.unique_partition.");
}

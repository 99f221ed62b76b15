// The parity harness: the target, input pairs, comparisons (see parity.h).
#include "parity/parity.h"

#include "backends/reference/reference_backend.h"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace tinyformer::parity {

std::set<std::string>& covered_ops() {
  static std::set<std::string> ops;
  return ops;
}

bool available() {
  static const bool usable = [] {
    const bool yes = target().usable();
    if (!yes) {
      std::cout << "[parity] the " << target().name
                << " backend cannot run here (no usable GPU, or a build without it): its parity "
                   "cases are skipped\n";
    }
    return yes;
  }();
  return usable;
}

Backend& dev() {
  return target().backend();
}
Backend& ref() {
  return reference_backend();
}
Device device() {
  return target().device;
}

bool supports(DType dtype) {
  for (DType d : target().dtypes) {
    if (d == dtype) return true;
  }
  return false;
}
std::vector<DType> supported(std::initializer_list<DType> dtypes) {
  std::vector<DType> out;
  for (DType d : dtypes) {
    if (supports(d)) out.push_back(d);
  }
  return out;
}
std::vector<DType> floating_dtypes() {
  return supported({DType::float32, DType::float64, DType::bfloat16});
}

Tensor to_dev(const Tensor& host) {
  if (!device().is_cpu()) return raw::to_device(host, device());
  // On the CPU too the target gets its own storage: an op writing into its operand must not
  // change the reference's.
  Tensor copy = empty(host.shape(), {.dtype = host.dtype(), .device = device()});
  raw::copy(host, copy);
  return copy;
}

const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::contiguous:
      return "contiguous";
    case Layout::transposed:
      return "transposed";
    case Layout::sliced:
      return "sliced";
    case Layout::broadcast:
      return "broadcast";
  }
  return "?";
}

namespace {

// A CPU tensor of `shape` and `dtype` holding uniform values in [lo, hi): floating dtypes round
// them (through float64), int64 rounds them down, bool takes value > 0.
Tensor uniform_host(const Shape& shape, DType dtype, std::uint64_t seed, double lo, double hi) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<std::size_t>(shape_numel(shape)));
  for (double& x : v) x = dist(gen);
  if (dtype == DType::int64) {
    std::vector<std::int64_t> ints(v.size());
    for (std::size_t i = 0; i < v.size(); ++i)
      ints[i] = static_cast<std::int64_t>(std::floor(v[i]));
    return from<std::int64_t>(ints, shape);
  }
  if (dtype == DType::boolean) {
    std::vector<bool> bools(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) bools[i] = v[i] > 0;
    return from<bool>(bools, shape);
  }
  return raw::to_dtype(from<double>(v, shape), dtype);
}

// Every other element along the last dim, and 3 elements of padding after each row, so that
// neither the last dim nor the rows merge into one contiguous run.
Shape sliced_strides(const Shape& shape) {
  Shape strides(shape.size(), 2);
  const auto n = static_cast<std::int64_t>(shape.size());
  for (std::int64_t d = n - 2; d >= 0; --d) {
    strides[d] = d == n - 2 ? 2 * shape[d + 1] + 3 : strides[d + 1] * shape[d + 1];
  }
  return strides;
}

// `storage_values` (a contiguous tensor) viewed with `layout` for `shape`; the same on both
// devices because the view is taken of a storage copied byte for byte.
Tensor view_of(const Tensor& storage_values, const Shape& shape, Layout layout) {
  const auto n = static_cast<std::int64_t>(shape.size());
  switch (layout) {
    case Layout::contiguous:
      return storage_values;
    case Layout::transposed: {
      Shape strides(shape.size(), 1);
      // Memory order: [..., last, second-to-last]; the view swaps them back.
      Shape mem = shape;
      std::swap(mem[n - 1], mem[n - 2]);
      std::int64_t s = 1;
      for (std::int64_t d = n - 1; d >= 0; --d) {
        strides[d] = s;
        s *= mem[d];
      }
      std::swap(strides[n - 1], strides[n - 2]);
      return raw::as_strided(storage_values, shape, strides, 0);
    }
    case Layout::sliced:
      return raw::as_strided(storage_values, shape, sliced_strides(shape), 1);
    case Layout::broadcast: {
      Shape row = shape;
      row[0] = 1;
      Tensor one =
          raw::as_strided(storage_values, row, Tensor(storage_values).view(row).strides(), 0);
      return raw::expand(one, shape, "parity");
    }
  }
  return storage_values;
}

// How many elements of storage a layout needs for `shape`.
std::int64_t storage_numel(const Shape& shape, Layout layout) {
  const std::int64_t n = shape_numel(shape);
  if (layout == Layout::sliced) {
    // The view starts at element 1 and reaches its last element at 1 + sum (size - 1) stride.
    if (n == 0) return 1;
    const Shape strides = sliced_strides(shape);
    std::int64_t last = 1;
    for (std::size_t d = 0; d < shape.size(); ++d) last += (shape[d] - 1) * strides[d];
    return last + 1;
  }
  if (layout == Layout::broadcast) return shape[0] == 0 ? 0 : n / shape[0];
  return n;
}

}  // namespace

Pair make_pair(const Shape& shape, DType dtype, Layout layout, std::uint64_t seed, double lo,
               double hi) {
  REQUIRE_MESSAGE(!shape.empty(), "make_pair needs at least one dim");
  if (layout == Layout::transposed) REQUIRE(shape.size() >= 2);
  const std::int64_t count = storage_numel(shape, layout);
  Shape storage_shape = {count};
  if (layout == Layout::contiguous) storage_shape = shape;
  if (layout == Layout::broadcast) {
    storage_shape = shape;
    storage_shape[0] = 1;
  }
  Tensor host = uniform_host(storage_shape, dtype, seed, lo, hi);
  Tensor host_flat = host.reshape({count});
  Tensor dev_flat = to_dev(host_flat);
  auto view = [&](const Tensor& flat) {
    if (layout == Layout::contiguous) return flat.view(shape);
    if (layout == Layout::broadcast) {
      Shape row = shape;
      row[0] = 1;
      return raw::expand(flat.view(row), shape, "parity");
    }
    return view_of(flat, shape, layout);
  };
  return {view(host_flat), view(dev_flat)};
}

Pair make_output(const Shape& shape, DType dtype) {
  const double sentinel = dtype == DType::boolean ? 1.0
                          : dtype == DType::int64 ? -12345.0
                                                  : std::nan("");
  Tensor host = full(shape, sentinel, {.dtype = dtype});
  return {host, to_dev(host)};
}

Pair make_from(const std::vector<std::int64_t>& values, const Shape& shape) {
  Tensor host = from<std::int64_t>(values, shape);
  return {host, to_dev(host)};
}

Pair on_both(const Tensor& host) {
  return {host, to_dev(host)};
}

void check_close(const Tensor& dev, const Tensor& ref, const std::string& what, double rtol,
                 double atol) {
  REQUIRE_MESSAGE(dev.shape() == ref.shape(), what, ": shapes differ");
  REQUIRE_MESSAGE((dev.dtype() == ref.dtype() || dev.dtype() == ref_dtype(ref.dtype()) ||
                   ref.dtype() == ref_dtype(dev.dtype())),
                  what, ": dtypes differ: ", dev.dtype(), " and ", ref.dtype());
  const DType dtype = dev.dtype();
  if (rtol < 0) {
    rtol = dtype == DType::float64    ? 1e-12
           : dtype == DType::float32  ? 1e-5
           : dtype == DType::bfloat16 ? 2e-2
                                      : 0.0;
  }
  if (atol < 0) {
    atol = dtype == DType::float64    ? 1e-12
           : dtype == DType::float32  ? 1e-6
           : dtype == DType::bfloat16 ? 1e-2
                                      : 0.0;
  }
  // Integers and bools compare exactly, through int64 (a double would round large values).
  const bool exact = dtype == DType::int64 || dtype == DType::boolean;
  const DType via = exact ? DType::int64 : DType::float64;
  const Tensor a = raw::contiguous(raw::to_dtype(raw::to_device(dev, Device::cpu()), via));
  const Tensor b = raw::contiguous(raw::to_dtype(ref, via));
  const std::size_t n = static_cast<std::size_t>(a.numel());
  std::size_t bad = 0, first = n;
  double worst = 0.0;
  std::string first_dev, first_ref;
  const auto mismatch = [&](std::size_t i, const auto& x, const auto& y) {
    if (first == n) {
      first = i;
      std::ostringstream x_text, y_text;
      x_text << x;
      y_text << y;
      first_dev = x_text.str();
      first_ref = y_text.str();
    }
    ++bad;
  };
  if (exact) {
    const auto av = a.to_vector<std::int64_t>(), bv = b.to_vector<std::int64_t>();
    for (std::size_t i = 0; i < n; ++i) {
      if (av[i] != bv[i]) mismatch(i, av[i], bv[i]);
    }
  } else {
    const auto av = a.to_vector<double>(), bv = b.to_vector<double>();
    for (std::size_t i = 0; i < n; ++i) {
      const bool both_nan = std::isnan(av[i]) && std::isnan(bv[i]);
      const double err = std::abs(av[i] - bv[i]);
      const bool ok = both_nan || (av[i] == bv[i]) || err <= atol + rtol * std::abs(bv[i]);
      if (!ok) mismatch(i, av[i], bv[i]);
      if (!both_nan && std::isfinite(err)) worst = std::max(worst, err);
    }
  }
  std::ostringstream msg;
  msg << what << " (" << dtype << "): " << bad << " of " << n << " elements differ";
  if (bad > 0) {
    msg << "; first at " << first << ": " << target().name << " " << first_dev << ", reference "
        << first_ref;
  }
  if (!exact) msg << "; max |diff| " << worst;
  CHECK_MESSAGE(bad == 0, msg.str());
}

DType ref_dtype(DType dtype) {
  return dtype == DType::bfloat16 ? DType::float32 : dtype;
}

Pair on_both(const Tensor& host, DType dtype) {
  const Tensor on_dev = raw::to_dtype(to_dev(raw::to_dtype(host, ref_dtype(dtype))), dtype);
  return {raw::to_device(raw::to_dtype(on_dev, ref_dtype(dtype)), Device::cpu()), on_dev};
}

Pair make_rounded_pair(const Shape& shape, DType dtype, Layout layout, std::uint64_t seed,
                       double lo, double hi) {
  if (dtype != DType::bfloat16) return make_pair(shape, dtype, layout, seed, lo, hi);
  const Pair f = make_pair(shape, DType::float32, layout, seed, lo, hi);
  const auto count = static_cast<std::int64_t>(f.dev.storage()->nbytes() / sizeof(float));
  const Tensor on_dev = raw::to_dtype(raw::as_strided(f.dev, {count}, {1}, 0), DType::bfloat16);
  const Tensor host = raw::to_device(raw::to_dtype(on_dev, DType::float32), Device::cpu());
  return {raw::as_strided(host, f.ref.shape(), f.ref.strides(), f.ref.offset()),
          raw::as_strided(on_dev, f.dev.shape(), f.dev.strides(), f.dev.offset())};
}

Pair make_rounded_output(const Shape& shape, DType dtype) {
  const Pair p = make_output(shape, ref_dtype(dtype));
  return {p.ref, raw::to_dtype(p.dev, dtype)};
}

}  // namespace tinyformer::parity

// Tensor layout, element access, factories and the raw layout operations.
#include "core/tensor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "core/backend.h"
#include "core/checked.h"
#include "core/random.h"

namespace tinyformer {

void Tensor::check_defined(const char* op) const {
  TF_CHECK(impl_ != nullptr, op, ": expected a defined tensor, got an undefined (empty) Tensor");
}

const Shape& Tensor::shape() const {
  check_defined("shape");
  return impl_->shape;
}
const Shape& Tensor::strides() const {
  check_defined("strides");
  return impl_->strides;
}
std::int64_t Tensor::size(std::int64_t d) const {
  return shape()[normalize_dim(d, dim(), "size")];
}
std::int64_t Tensor::stride(std::int64_t d) const {
  return strides()[normalize_dim(d, dim(), "stride")];
}
std::int64_t Tensor::offset() const {
  check_defined("offset");
  return impl_->offset;
}
std::int64_t Tensor::numel() const {
  return shape_numel(shape());
}
DType Tensor::dtype() const {
  check_defined("dtype");
  return impl_->dtype;
}
Device Tensor::device() const {
  check_defined("device");
  return impl_->storage->device();
}
TensorOptions Tensor::options() const {
  check_defined("options");
  return {.dtype = impl_->dtype, .device = impl_->storage->device()};
}
const std::shared_ptr<Storage>& Tensor::storage() const {
  check_defined("storage");
  return impl_->storage;
}

bool Tensor::is_sole_owner() const {
  return impl_ != nullptr && impl_.use_count() == 1 &&
         (impl_->storage == nullptr || impl_->storage.use_count() == 1);
}

std::uint64_t Tensor::version() const {
  check_defined("version");
  return impl_->storage == nullptr ? 0 : impl_->storage->version();
}

void Tensor::bump_version() const {
  check_defined("bump_version");
  if (impl_->storage != nullptr) impl_->storage->bump_version();
}

bool Tensor::is_contiguous() const {
  const Shape& s = shape();
  if (shape_numel(s) == 0) return true;  // no element to misplace, as in PyTorch
  std::int64_t expected = 1;
  for (std::size_t i = s.size(); i-- > 0;) {
    if (s[i] == 1) continue;
    if (impl_->strides[i] != expected) return false;
    expected *= s[i];
  }
  return true;
}

void* Tensor::data_ptr() const {
  check_defined("data_ptr");
  char* data = static_cast<char*>(impl_->storage->data());
  // Only an empty view can start past the end of its storage (a window of a tensor with a zero
  // size elsewhere: its offset counts elements it does not have). Nothing is read through its
  // pointer, so it gets the storage's own instead of one computed out of bounds.
  std::int64_t byte_offset = 0;
  if (mul_overflows(impl_->offset, static_cast<std::int64_t>(element_size(impl_->dtype)),
                    byte_offset) ||
      byte_offset < 0 || static_cast<std::uint64_t>(byte_offset) > impl_->storage->nbytes()) {
    return data;
  }
  return data + byte_offset;
}

template <typename T>
T* Tensor::data() const {
  TF_CHECK(dtype() == dtype_of<T>(), "data: the tensor holds ", dtype(), ", asked for ",
           dtype_of<T>());
  return static_cast<T*>(data_ptr());
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  check_defined("to_vector");
  Tensor host = raw::contiguous(raw::to_dtype(raw::to_device(*this, Device::cpu()), dtype_of<T>()));
  const T* p = host.data<T>();
  return std::vector<T>(p, p + host.numel());
}

template <typename T>
T Tensor::item() const {
  TF_CHECK(numel() == 1, "item: expected a tensor with one element, got shape ",
           shape_str(shape()));
  return to_vector<T>()[0];
}

#define TF_INSTANTIATE_ACCESS(T)                        \
  template T* Tensor::data<T>() const;                  \
  template std::vector<T> Tensor::to_vector<T>() const; \
  template T Tensor::item<T>() const;
TF_INSTANTIATE_ACCESS(float)
TF_INSTANTIATE_ACCESS(double)
TF_INSTANTIATE_ACCESS(std::int64_t)
TF_INSTANTIATE_ACCESS(bool)
TF_INSTANTIATE_ACCESS(bfloat16)
#undef TF_INSTANTIATE_ACCESS

Tensor Tensor::detach() const {
  check_defined("detach");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->shape = impl_->shape;
  impl->strides = impl_->strides;
  impl->offset = impl_->offset;
  impl->dtype = impl_->dtype;
  return Tensor(std::move(impl));
}

bool Tensor::requires_grad() const {
  return impl_ && impl_->requires_grad;
}

Tensor& Tensor::requires_grad_(bool on) {
  check_defined("requires_grad_");
  TF_CHECK(!on || is_floating(dtype()),
           "requires_grad_: only floating tensors can require gradients, got ", dtype());
  TF_CHECK(impl_->grad_fn == nullptr,
           "requires_grad_: expected a leaf tensor, got the output of an op (use detach() first)");
  impl_->requires_grad = on;
  return *this;
}

bool Tensor::is_view() const {
  return impl_ != nullptr && impl_->is_view;
}

bool Tensor::is_leaf() const {
  return impl_ == nullptr || impl_->grad_fn == nullptr;
}

Tensor Tensor::grad() const {
  check_defined("grad");
  return impl_->grad;
}

void Tensor::set_grad(const Tensor& grad) const {
  check_defined("set_grad");
  if (grad.defined()) {
    TF_CHECK(grad.shape() == shape() && grad.dtype() == dtype() && grad.device() == device(),
             "set_grad: expected a gradient of shape ", shape_str(shape()), " ", dtype(), " on ",
             device(), ", got ", shape_str(grad.shape()), " ", grad.dtype(), " on ", grad.device());
  }
  impl_->grad = grad;
}

void Tensor::zero_grad() const {
  check_defined("zero_grad");
  impl_->grad = Tensor();
}

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<autograd::Node> none;
  return impl_ ? impl_->grad_fn : none;
}

// --- Printing ---

namespace {
void print_values(std::ostream& os, const std::vector<double>& v, const Shape& shape,
                  const Shape& strides, std::size_t d, std::int64_t base, bool integral) {
  if (shape.empty()) {
    os << v[0];
    return;
  }
  const std::int64_t n = shape[d];
  const bool elide = n > 8;
  os << "[";
  for (std::int64_t i = 0; i < n; ++i) {
    if (elide && i == 3) {
      os << (d + 1 == shape.size() ? "..., " : "...,\n" + std::string(d + 1, ' '));
      i = n - 3;
    }
    const std::int64_t at = base + i * strides[d];
    if (d + 1 == shape.size()) {
      if (integral) {
        os << static_cast<std::int64_t>(v[at]);
      } else {
        os << std::setprecision(4) << v[at];
      }
    } else {
      print_values(os, v, shape, strides, d + 1, at, integral);
    }
    if (i + 1 < n) os << (d + 1 == shape.size() ? ", " : ",\n" + std::string(d + 1, ' '));
  }
  os << "]";
}
}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "Tensor(undefined)";
  os << "Tensor(shape=" << shape_str(t.shape()) << ", dtype=" << t.dtype();
  if (!t.device().is_cpu()) os << ", device=" << t.device();
  if (t.requires_grad()) os << ", requires_grad";
  os << ")\n";
  const auto values = t.to_vector<double>();
  print_values(os, values, t.shape(), contiguous_strides(t.shape()), 0, 0, !is_floating(t.dtype()));
  return os;
}

// --- Factories ---

namespace {
[[noreturn]] void fail_out_of_memory(const char* op, const Shape& shape, DType dtype,
                                     std::int64_t bytes, const std::string& why) {
  throw OutOfMemory(detail::concat(op, ": out of memory: shape ", shape_str(shape), " ", dtype,
                                   " asked for ", bytes, " bytes (", why, ")"));
}
}  // namespace

std::int64_t storage_bytes(const Shape& shape, DType dtype, const char* op) {
  const std::int64_t bytes = checked_mul(shape_numel(shape, op),
                                         static_cast<std::int64_t>(element_size(dtype)), op, shape);
  if (bytes > kMaxStorageBytes) {
    fail_out_of_memory(op, shape, dtype, bytes,
                       detail::concat("more than the ", kMaxStorageBytes,
                                      " bytes, 1 TiB, that one tensor may hold"));
  }
  return bytes;
}

namespace {
// A fresh contiguous tensor for the factory `op`. Every size computed here is checked, and an
// allocation that cannot be served is an OutOfMemory naming the op, the shape and the bytes.
Tensor make_tensor(const Shape& shape, DType dtype, Device device, const char* op) {
  for (auto d : shape) {
    TF_CHECK(d >= 0, op, ": expected non-negative sizes, got shape ", shape_str(shape));
  }
  auto impl = std::make_shared<TensorImpl>();
  impl->strides = contiguous_strides(shape, op);
  const std::int64_t bytes = storage_bytes(shape, dtype, op);
  auto out_of_memory = [&](const std::string& why) {
    fail_out_of_memory(op, shape, dtype, bytes, why);
  };
  try {
    impl->storage = std::make_shared<Storage>(static_cast<std::size_t>(bytes), device);
  } catch (const OutOfMemory& e) {
    out_of_memory(e.what());
  } catch (const std::bad_alloc&) {
    out_of_memory("the allocator failed");
  }
  impl->shape = shape;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor finish(Tensor t, const TensorOptions& options) {
  if (options.requires_grad) t.requires_grad_(true);
  return t;
}
}  // namespace

Tensor empty(const Shape& shape, const TensorOptions& options) {
  return finish(make_tensor(shape, options.dtype, options.device, "empty"), options);
}

namespace {
Tensor filled(const Shape& shape, double value, const TensorOptions& options, const char* op) {
  Tensor t = make_tensor(shape, options.dtype, options.device, op);
  raw::fill(t, value);
  return finish(t, options);
}
}  // namespace

Tensor full(const Shape& shape, double value, const TensorOptions& options) {
  return filled(shape, value, options, "full");
}
Tensor zeros(const Shape& shape, const TensorOptions& options) {
  return filled(shape, 0.0, options, "zeros");
}
Tensor ones(const Shape& shape, const TensorOptions& options) {
  return filled(shape, 1.0, options, "ones");
}
Tensor scalar_tensor(double value, const TensorOptions& options) {
  return filled({}, value, options, "scalar_tensor");
}

Tensor empty_like(const Tensor& t) {
  return empty(t.shape(), {.dtype = t.dtype(), .device = t.device()});
}
Tensor zeros_like(const Tensor& t) {
  return zeros(t.shape(), {.dtype = t.dtype(), .device = t.device()});
}
Tensor ones_like(const Tensor& t) {
  return ones(t.shape(), {.dtype = t.dtype(), .device = t.device()});
}
Tensor full_like(const Tensor& t, double value) {
  return full(t.shape(), value, {.dtype = t.dtype(), .device = t.device()});
}

Tensor arange(double start, double end, double step, const TensorOptions& options) {
  TF_CHECK(std::isfinite(start) && std::isfinite(end) && std::isfinite(step),
           "arange: expected finite start, end and step, got ", start, ", ", end, " and ", step);
  TF_CHECK(step != 0.0, "arange: expected a non-zero step, got 0");
  const double length = std::ceil((end - start) / step);
  TF_CHECK(length >= 0, "arange: the step ", step, " never reaches ", end, " from ", start);
  // 2^63 is the first double an int64 cannot hold (converting it would be undefined); any
  // length below it is then checked against the memory it needs.
  TF_CHECK(length < 9223372036854775808.0, "arange: [", start, ", ", end, ") in steps of ", step,
           " has ", length, " elements, more than a 64-bit size can count");
  const auto n = static_cast<std::int64_t>(length);
  Tensor t = make_tensor({n}, options.dtype, options.device, "arange");
  if (n > 0) backend(t.device()).arange(t, start, step);
  return finish(t, options);
}

Tensor arange(std::int64_t end, const TensorOptions& options) {
  return arange(0.0, static_cast<double>(end), 1.0, options);
}

namespace {
Tensor random_tensor(const Shape& shape, const TensorOptions& options, RandomKind kind, double a,
                     double b, const char* op) {
  TF_CHECK(is_floating(options.dtype), op, ": expected a floating dtype, got ", options.dtype);
  Tensor t = make_tensor(shape, options.dtype, options.device, op);
  const auto [seed, offset] = default_generator().reserve(static_cast<std::uint64_t>(t.numel()));
  if (t.numel() > 0) backend(t.device()).random(t, kind, seed, offset, a, b);
  return finish(t, options);
}
}  // namespace

Tensor randn(const Shape& shape, const TensorOptions& options) {
  return random_tensor(shape, options, RandomKind::normal, 0.0, 1.0, "randn");
}
Tensor rand(const Shape& shape, const TensorOptions& options) {
  return random_tensor(shape, options, RandomKind::uniform, 0.0, 1.0, "rand");
}

template <typename T>
Tensor from(const std::vector<T>& values, const Shape& shape, Device device) {
  const std::int64_t n = shape_numel(shape, "from");
  TF_CHECK(static_cast<std::int64_t>(values.size()) == n, "from: shape ", shape_str(shape),
           " holds ", n, " elements, got ", values.size(), " values");
  Tensor host = make_tensor(shape, dtype_of<T>(), Device::cpu(), "from");
  if constexpr (std::is_same_v<T, bool>) {
    auto* p = static_cast<bool*>(host.data_ptr());
    for (std::size_t i = 0; i < values.size(); ++i) p[i] = values[i];
  } else if (!values.empty()) {
    std::memcpy(host.data_ptr(), values.data(), values.size() * sizeof(T));
  }
  return device.is_cpu() ? host : raw::to_device(host, device);
}
template Tensor from<float>(const std::vector<float>&, const Shape&, Device);
template Tensor from<double>(const std::vector<double>&, const Shape&, Device);
template Tensor from<std::int64_t>(const std::vector<std::int64_t>&, const Shape&, Device);
template Tensor from<bool>(const std::vector<bool>&, const Shape&, Device);
template Tensor from<bfloat16>(const std::vector<bfloat16>&, const Shape&, Device);

// --- Raw layout operations ---

namespace raw {

Tensor as_strided(const Tensor& base, const Shape& shape, const Shape& strides, std::int64_t offset,
                  const char* op) {
  TF_CHECK(shape.size() == strides.size(), op, ": ", shape.size(), " sizes but ", strides.size(),
           " strides");
  for (std::size_t i = 0; i < shape.size(); ++i) {
    TF_CHECK(shape[i] >= 0, op, ": negative size in ", shape_str(shape));
  }
  const bool empty = shape_numel(shape, op) == 0;
  // Every reachable element must lie inside the storage (an empty view reaches none). A span
  // that overflows reaches outside any storage.
  const auto capacity =
      static_cast<std::int64_t>(base.storage()->nbytes() / element_size(base.dtype()));
  std::int64_t lo = offset, hi = offset;
  bool inside = true;
  for (std::size_t i = 0; !empty && inside && i < shape.size(); ++i) {
    std::int64_t span = 0;
    inside = !mul_overflows(shape[i] - 1, strides[i], span);
    std::int64_t& end = span < 0 ? lo : hi;
    inside = inside && !add_overflows(end, span, end);
  }
  TF_CHECK(empty || (inside && lo >= 0 && hi < capacity), op, ": the view ", shape_str(shape),
           " with strides ", shape_str(strides), " at offset ", offset,
           " reaches outside a storage of ", capacity, " elements");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage();
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}

Tensor expand(const Tensor& t, const Shape& shape, const char* op) {
  if (t.shape() == shape) return t;
  const auto lead = static_cast<std::int64_t>(shape.size()) - t.dim();
  TF_CHECK(lead >= 0, op, ": cannot broadcast shape ", shape_str(t.shape()), " to ",
           shape_str(shape));
  Shape strides(shape.size(), 0);
  for (std::int64_t d = 0; d < t.dim(); ++d) {
    const std::int64_t want = shape[d + lead], have = t.size(d);
    TF_CHECK(have == want || have == 1, op, ": cannot broadcast shape ", shape_str(t.shape()),
             " to ", shape_str(shape));
    strides[d + lead] = have == want ? t.stride(d) : 0;
  }
  return as_strided(t, shape, strides, t.offset(), op);
}

namespace {

// The bytes [first, last] that t's elements span in its storage (t not empty; strides >= 0).
std::pair<std::int64_t, std::int64_t> byte_span(const Tensor& t) {
  std::int64_t last = t.offset();
  for (std::int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  const auto size = static_cast<std::int64_t>(element_size(t.dtype()));
  return {t.offset() * size, (last + 1) * size - 1};
}

// Whether two elements of t share an address: a dim of stride 0 and size > 1 (an expanded view),
// or dims whose strides interleave (as_strided's overlapping windows).
bool self_overlapping(const Tensor& t) {
  std::vector<std::int64_t> dims;
  for (std::int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) > 1) dims.push_back(d);
  }
  std::sort(dims.begin(), dims.end(),
            [&](std::int64_t x, std::int64_t y) { return t.stride(x) < t.stride(y); });
  // Each stride must step past the last element that the dims of smaller strides reach.
  std::int64_t reach = 0;  // the largest offset the dims so far reach
  for (std::int64_t d : dims) {
    if (t.stride(d) <= reach) return true;
    reach += (t.size(d) - 1) * t.stride(d);
  }
  return false;
}

}  // namespace

void copy(const Tensor& src, const Tensor& dst) {
  TF_CHECK(src.shape() == dst.shape(), "copy: expected equal shapes, got ", shape_str(src.shape()),
           " into ", shape_str(dst.shape()));
  if (src.numel() == 0) return;
  // As PyTorch: a destination whose elements share memory has no defined result, and a source
  // that overlaps the destination would be read after parts of it were written.
  TF_CHECK(!self_overlapping(dst), "copy: expected a destination whose elements do not share ",
           "memory, got shape ", shape_str(dst.shape()), " with strides ", shape_str(dst.strides()),
           " (an expanded view); copy into a contiguous tensor");
  if (src.storage() == dst.storage() && src.device() == dst.device()) {
    if (src.offset() == dst.offset() && src.strides() == dst.strides() &&
        src.dtype() == dst.dtype()) {
      return;  // the same elements: nothing to do
    }
    const auto [src_first, src_last] = byte_span(src);
    const auto [dst_first, dst_last] = byte_span(dst);
    TF_CHECK(src_last < dst_first || dst_last < src_first,
             "copy: the source and the destination overlap in memory (views of one storage ",
             "whose elements may coincide); copy from src.clone() instead");
  }
  dst.bump_version();
  if (src.device() == dst.device()) {
    backend(src.device()).copy(src, dst);
    return;
  }
  // Across devices: bytes move contiguously in the source dtype, then convert on the target.
  Tensor packed = contiguous(src);
  Tensor landing = dst.is_contiguous() && dst.dtype() == src.dtype()
                       ? dst
                       : empty(src.shape(), {.dtype = src.dtype(), .device = dst.device()});
  Backend& mover = src.device().is_cpu() ? backend(dst.device()) : backend(src.device());
  mover.memcpy(landing.data_ptr(), dst.device(), packed.data_ptr(), src.device(),
               static_cast<std::size_t>(src.numel()) * element_size(src.dtype()));
  if (!landing.is_same(dst)) backend(dst.device()).copy(landing, dst);
}

Tensor contiguous(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor out = empty(t.shape(), {.dtype = t.dtype(), .device = t.device()});
  backend(t.device()).copy(t, out);
  return out;
}

Tensor to_dtype(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  Tensor out = empty(t.shape(), {.dtype = dtype, .device = t.device()});
  if (t.numel() > 0) backend(t.device()).copy(t, out);
  return out;
}

Tensor to_device(const Tensor& t, Device device) {
  if (t.device() == device) return t;
  backend(device);  // a clear error when no backend serves the device, or it is absent
  Tensor out = empty(t.shape(), {.dtype = t.dtype(), .device = device});
  copy(t, out);
  return out;
}

void fill(const Tensor& t, double value) {
  if (t.numel() == 0) return;
  t.bump_version();
  backend(t.device()).fill(t, value);
}

void set_data(const Tensor& dst, const Tensor& src) {
  TF_CHECK(dst.defined() && src.defined(), "set_data: expected defined tensors");
  TF_CHECK(dst.shape() == src.shape(), "set_data: expected shape ", shape_str(dst.shape()),
           ", got ", shape_str(src.shape()));
  TensorImpl* impl = dst.impl();
  impl->storage = src.storage();
  impl->strides = src.strides();
  impl->offset = src.offset();
  impl->dtype = src.dtype();
  if (impl->grad.defined() &&
      (impl->grad.device() != src.device() || impl->grad.dtype() != src.dtype())) {
    impl->grad = Tensor();
  }
}

}  // namespace raw

}  // namespace tinyformer

// CpuBackend::conv1d and conv1d_backward: 1-D convolution over [B, C, L] with PyTorch's
// semantics (zero padding on both sides, Lout = (L + 2 padding - K) / stride + 1). float32 runs on
// oneDNN's convolution primitives (a 1-D problem is its 3-D ncw/oiw layout); float64, which
// gradient checks use, runs on plain loops that follow the formulas below.
#include <omp.h>

#include <cstdint>
#include <cstring>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/dnnl_context.h"
#include "core/error.h"
#include "core/op_checks.h"

namespace tinyformer::cpu {

namespace {

// --- float64 loops ---
// out[b, o, t] = bias[o] + sum_{c, k} w[o, c, k] * x[b, c, t * stride - padding + k]
// x: [B, Cin, L], w: [Cout, Cin, K], bias: [Cout] or null, out: [B, Cout, Lout]
template <typename T>
void conv_forward_loop(const ConvShape& s, const T* x, const T* w, const T* bias, T* out) {
#pragma omp parallel for collapse(2) schedule(static) if (!omp_in_parallel())
  for (std::int64_t b = 0; b < s.batch; ++b) {
    for (std::int64_t o = 0; o < s.c_out; ++o) {
      T* out_row = out + (b * s.c_out + o) * s.out_length;
      for (std::int64_t t = 0; t < s.out_length; ++t) {
        T acc = bias != nullptr ? bias[o] : T(0);
        for (std::int64_t c = 0; c < s.c_in; ++c) {
          const T* x_row = x + (b * s.c_in + c) * s.length;
          const T* w_row = w + (o * s.c_in + c) * s.kernel;
          for (std::int64_t k = 0; k < s.kernel; ++k) {
            const std::int64_t i = t * s.stride - s.padding + k;
            if (i >= 0 && i < s.length) acc += w_row[k] * x_row[i];
          }
        }
        out_row[t] = acc;
      }
    }
  }
}

// grad_x[b, c, i] = sum over (o, t, k) with t * stride - padding + k = i of g[b, o, t] w[o, c, k]
// One batch element per thread, so no two threads add into the same grad_x row.
template <typename T>
void conv_backward_data_loop(const ConvShape& s, const T* g, const T* w, T* gx) {
#pragma omp parallel for schedule(static) if (!omp_in_parallel())
  for (std::int64_t b = 0; b < s.batch; ++b) {
    T* gx_b = gx + b * s.c_in * s.length;
    std::memset(gx_b, 0, static_cast<std::size_t>(s.c_in * s.length) * sizeof(T));
    for (std::int64_t o = 0; o < s.c_out; ++o) {
      const T* g_row = g + (b * s.c_out + o) * s.out_length;
      for (std::int64_t c = 0; c < s.c_in; ++c) {
        const T* w_row = w + (o * s.c_in + c) * s.kernel;
        T* gx_row = gx_b + c * s.length;
        for (std::int64_t t = 0; t < s.out_length; ++t) {
          for (std::int64_t k = 0; k < s.kernel; ++k) {
            const std::int64_t i = t * s.stride - s.padding + k;
            if (i >= 0 && i < s.length) gx_row[i] += g_row[t] * w_row[k];
          }
        }
      }
    }
  }
}

// grad_w[o, c, k] = sum_{b, t} g[b, o, t] x[b, c, t * stride - padding + k]
template <typename T>
void conv_backward_weight_loop(const ConvShape& s, const T* g, const T* x, T* gw) {
#pragma omp parallel for collapse(2) schedule(static) if (!omp_in_parallel())
  for (std::int64_t o = 0; o < s.c_out; ++o) {
    for (std::int64_t c = 0; c < s.c_in; ++c) {
      for (std::int64_t k = 0; k < s.kernel; ++k) {
        T acc = 0;
        for (std::int64_t b = 0; b < s.batch; ++b) {
          const T* g_row = g + (b * s.c_out + o) * s.out_length;
          const T* x_row = x + (b * s.c_in + c) * s.length;
          for (std::int64_t t = 0; t < s.out_length; ++t) {
            const std::int64_t i = t * s.stride - s.padding + k;
            if (i >= 0 && i < s.length) acc += g_row[t] * x_row[i];
          }
        }
        gw[(o * s.c_in + c) * s.kernel + k] = acc;
      }
    }
  }
}

// grad_bias[o] = sum_{b, t} g[b, o, t]; used by both dtypes when no weight gradient is wanted
template <typename T>
void conv_backward_bias_loop(const ConvShape& s, const T* g, T* gb) {
  for (std::int64_t o = 0; o < s.c_out; ++o) {
    T acc = 0;
    for (std::int64_t b = 0; b < s.batch; ++b) {
      const T* g_row = g + (b * s.c_out + o) * s.out_length;
      for (std::int64_t t = 0; t < s.out_length; ++t) acc += g_row[t];
    }
    gb[o] = acc;
  }
}

// --- float32 on oneDNN ---
// The three primitives share these descriptors; padding_r equals padding_l, and oneDNN's output
// length formula (integer division) is the same as ours.
struct ConvDescs {
  dnnl::memory::desc src, weights, bias, dst;
  dnnl::memory::dims strides, padding;
};

ConvDescs conv_descs(const ConvShape& s, bool with_bias) {
  using tag = dnnl::memory::format_tag;
  const auto f32 = dnnl::memory::data_type::f32;
  return {dnnl::memory::desc({s.batch, s.c_in, s.length}, f32, tag::ncw),
          dnnl::memory::desc({s.c_out, s.c_in, s.kernel}, f32, tag::oiw),
          with_bias ? dnnl::memory::desc({s.c_out}, f32, tag::x) : dnnl::memory::desc(),
          dnnl::memory::desc({s.batch, s.c_out, s.out_length}, f32, tag::ncw),
          {s.stride},
          {s.padding}};
}

// Multiply-adds of one pass, which decides whether it is worth the thread team.
std::int64_t conv_work(const ConvShape& s) {
  return s.batch * s.c_out * s.out_length * s.c_in * s.kernel;
}

PrimitiveKey conv_key(const char* op, const ConvShape& s, bool with_bias) {
  PrimitiveKey key(op);
  key.add(s.batch).add(s.c_in).add(s.length).add(s.c_out).add(s.kernel).add(s.stride);
  return key.add(s.padding).add(with_bias ? 1 : 0);
}

dnnl::convolution_forward::primitive_desc conv_forward_pd(const ConvDescs& d,
                                                          dnnl::prop_kind prop) {
  return dnnl::convolution_forward::primitive_desc(
      dnnl::convolution_forward::desc(prop, dnnl::algorithm::convolution_direct, d.src, d.weights,
                                      d.bias, d.dst, d.strides, d.padding, d.padding),
      dnnl_attr(), dnnl_engine());
}

void conv_forward_dnnl(const ConvShape& s, const Tensor& x, const Tensor& w, const Tensor& bias,
                       const Tensor& out) {
  const bool with_bias = bias.defined();
  const ConvDescs d = conv_descs(s, with_bias);
  const CachedPrimitive p = cached_primitive(
      conv_key("conv1d", s, with_bias),
      [&] {
        auto pd = conv_forward_pd(d, dnnl::prop_kind::forward_training);
        return CachedPrimitive{dnnl::convolution_forward(pd), pd};
      },
      dnnl_threads(conv_work(s)));
  std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, dnnl_memory(d.src, x)},
                                                {DNNL_ARG_WEIGHTS, dnnl_memory(d.weights, w)},
                                                {DNNL_ARG_DST, dnnl_memory(d.dst, out)}};
  if (with_bias) args.emplace(DNNL_ARG_BIAS, dnnl_memory(d.bias, bias));
  dnnl_execute(p, std::move(args), "conv1d", dnnl_threads(conv_work(s)));
}

void conv_backward_data_dnnl(const ConvShape& s, const Tensor& g, const Tensor& w,
                             const Tensor& gx) {
  const ConvDescs d = conv_descs(s, false);
  const CachedPrimitive p = cached_primitive(
      conv_key("conv1d_backward_data", s, false),
      [&] {
        dnnl::convolution_backward_data::primitive_desc pd(
            dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, d.src,
                                                  d.weights, d.dst, d.strides, d.padding,
                                                  d.padding),
            dnnl_attr(), dnnl_engine(), conv_forward_pd(d, dnnl::prop_kind::forward_training));
        return CachedPrimitive{dnnl::convolution_backward_data(pd), pd};
      },
      dnnl_threads(conv_work(s)));
  dnnl_execute(p,
               {{DNNL_ARG_DIFF_DST, dnnl_memory(d.dst, g)},
                {DNNL_ARG_WEIGHTS, dnnl_memory(d.weights, w)},
                {DNNL_ARG_DIFF_SRC, dnnl_memory(d.src, gx)}},
               "conv1d_backward", dnnl_threads(conv_work(s)));
}

// grad_w: [Cout, Cin, K]; grad_b: [Cout] or undefined
void conv_backward_weights_dnnl(const ConvShape& s, const Tensor& g, const Tensor& x,
                                const Tensor& gw, const Tensor& gb) {
  const bool with_bias = gb.defined();
  const ConvDescs d = conv_descs(s, with_bias);
  const CachedPrimitive p = cached_primitive(
      conv_key("conv1d_backward_weights", s, with_bias),
      [&] {
        dnnl::convolution_backward_weights::primitive_desc pd(
            dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, d.src,
                                                     d.weights, d.bias, d.dst, d.strides, d.padding,
                                                     d.padding),
            dnnl_attr(), dnnl_engine(), conv_forward_pd(d, dnnl::prop_kind::forward_training));
        return CachedPrimitive{dnnl::convolution_backward_weights(pd), pd};
      },
      dnnl_threads(conv_work(s)));
  std::unordered_map<int, dnnl::memory> args = {
      {DNNL_ARG_SRC, dnnl_memory(d.src, x)},
      {DNNL_ARG_DIFF_DST, dnnl_memory(d.dst, g)},
      {DNNL_ARG_DIFF_WEIGHTS, dnnl_memory(d.weights, gw)}};
  if (with_bias) args.emplace(DNNL_ARG_DIFF_BIAS, dnnl_memory(d.bias, gb));
  dnnl_execute(p, std::move(args), "conv1d_backward", dnnl_threads(conv_work(s)));
}

template <typename T>
T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

}  // namespace

// x: [B, Cin, L], weight: [Cout, Cin, K], bias: [Cout] or undefined, out: [B, Cout, Lout]
void CpuBackend::conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        std::int64_t stride, std::int64_t padding, const Tensor& out) {
  const ConvShape s = check_conv1d_args(x, weight, bias, stride, padding, out, *this);
  if (out.numel() == 0) return;
  // With no input channels the sum is empty and out is the bias alone: the loop handles that
  // (oneDNN rejects zero-sized tensors).
  if (x.dtype() == DType::float32 && s.c_in > 0) {
    conv_forward_dnnl(s, x, weight, bias, out);
  } else if (x.dtype() == DType::float32) {
    conv_forward_loop(s, x.data<float>(), weight.data<float>(), data_or_null<float>(bias),
                      out.data<float>());
  } else {
    conv_forward_loop(s, x.data<double>(), weight.data<double>(), data_or_null<double>(bias),
                      out.data<double>());
  }
}

// grad: [B, Cout, Lout]; x, weight as in the forward; grad_x: [B, Cin, L],
// grad_weight: [Cout, Cin, K], grad_bias: [Cout], each undefined when not wanted.
void CpuBackend::conv1d_backward(const Tensor& grad, const Tensor& x, const Tensor& weight,
                                 std::int64_t stride, std::int64_t padding, const Tensor& grad_x,
                                 const Tensor& grad_weight, const Tensor& grad_bias) {
  const ConvShape s = check_conv1d_backward_args(grad, x, weight, stride, padding, grad_x,
                                                 grad_weight, grad_bias, *this);
  // oneDNN rejects zero-sized problems; their gradients are all zeros.
  const bool empty = s.batch == 0 || s.c_in == 0 || s.c_out == 0;
  if (x.dtype() == DType::float32 && !empty) {
    if (grad_x.defined()) conv_backward_data_dnnl(s, grad, weight, grad_x);
    if (grad_weight.defined()) {
      conv_backward_weights_dnnl(s, grad, x, grad_weight, grad_bias);
    } else if (grad_bias.defined()) {
      conv_backward_bias_loop(s, grad.data<float>(), grad_bias.data<float>());
    }
    return;
  }
  auto run = [&]<typename T>(T) {
    if (grad_x.defined())
      conv_backward_data_loop(s, grad.data<T>(), weight.data<T>(), grad_x.data<T>());
    if (grad_weight.defined()) {
      conv_backward_weight_loop(s, grad.data<T>(), x.data<T>(), grad_weight.data<T>());
    }
    if (grad_bias.defined()) conv_backward_bias_loop(s, grad.data<T>(), grad_bias.data<T>());
  };
  if (x.dtype() == DType::float32) {
    run(0.0f);
  } else {
    run(0.0);
  }
}

}  // namespace tinyformer::cpu

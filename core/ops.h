// The primitive ops (generated from core/ops.def) and the kinds their parameters choose from.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace tinyformer {

enum class Op : int {
#define TF_OP(name, params, args) name,
#include "core/ops.def"
#undef TF_OP
};

inline constexpr std::array op_names = {
#define TF_OP(name, params, args) #name,
#include "core/ops.def"
#undef TF_OP
};

inline constexpr std::size_t op_count = op_names.size();
inline const char* op_name(Op op) {
  return op_names[static_cast<std::size_t>(op)];
}

// Elementwise functions of one input (rows of core/elementwise.def). alpha is the exponent of
// pow_scalar.
enum class UnaryOp : int {
#define TF_UNARY(name, reads, domain, int64) name,
#include "core/elementwise.def"
};
inline constexpr std::array unary_ops = {
#define TF_UNARY(name, reads, domain, int64) UnaryOp::name,
#include "core/elementwise.def"
};
inline constexpr std::size_t unary_op_count = unary_ops.size();

// What a unary op's derivative reads besides the incoming gradient.
enum class UnaryReads : int { none, x, y };
// The inputs on which a unary op and its derivative are finite and smooth.
enum class UnaryDomain : int { real, positive };

struct UnaryTraits {
  const char* name;
  UnaryReads reads;
  UnaryDomain domain;
  bool int64;  // also takes int64 tensors
};
inline constexpr std::array<UnaryTraits, unary_op_count> unary_traits_table = {{
#define TF_UNARY(name, reads, domain, int64) {#name, UnaryReads::reads, UnaryDomain::domain, int64},
#include "core/elementwise.def"
}};
inline constexpr const UnaryTraits& unary_traits(UnaryOp op) {
  return unary_traits_table[static_cast<std::size_t>(op)];
}
inline constexpr const char* unary_name(UnaryOp op) {
  return unary_traits(op).name;
}

// Elementwise functions of two inputs (rows of core/elementwise.def); the comparisons produce
// booleans.
enum class BinaryOp : int {
#define TF_BINARY(name, kind) name,
#include "core/elementwise.def"
};
inline constexpr std::array binary_ops = {
#define TF_BINARY(name, kind) BinaryOp::name,
#include "core/elementwise.def"
};
inline constexpr std::size_t binary_op_count = binary_ops.size();
inline constexpr std::array<const char*, binary_op_count> binary_names = {
#define TF_BINARY(name, kind) #name,
#include "core/elementwise.def"
};
inline constexpr std::array<bool, binary_op_count> binary_is_comparison = {
#define TF_BINARY(name, kind) std::string_view(#kind) == "comparison",
#include "core/elementwise.def"
};
inline constexpr const char* binary_name(BinaryOp op) {
  return binary_names[static_cast<std::size_t>(op)];
}
inline constexpr bool is_comparison(BinaryOp op) {
  return binary_is_comparison[static_cast<std::size_t>(op)];
}

// The activation a fused product applies to its result (the `linear` op of core/ops.def): none,
// or one of these unary rows of core/elementwise.def, computed with that row's math
// (core/unary_math.h) or a library's own version of it (docs/matmul.md).
enum class Epilogue : int { none, relu, gelu, gelu_tanh };
inline constexpr std::array epilogues = {Epilogue::none, Epilogue::relu, Epilogue::gelu,
                                         Epilogue::gelu_tanh};
// Whether `e` is one of the values above (an Epilogue cast from an integer may be none of them).
inline constexpr bool is_epilogue(Epilogue e) {
  return static_cast<int>(e) >= 0 && static_cast<std::size_t>(e) < epilogues.size();
}
// The unary row an activation epilogue applies (not for Epilogue::none).
inline constexpr UnaryOp epilogue_op(Epilogue e) {
  return e == Epilogue::relu ? UnaryOp::relu
                             : (e == Epilogue::gelu ? UnaryOp::gelu : UnaryOp::gelu_tanh);
}
// "none", or the row's name.
inline constexpr const char* epilogue_name(Epilogue e) {
  return e == Epilogue::none ? "none" : unary_name(epilogue_op(e));
}
// The epilogue that applies `op`, if a fused product can apply it.
inline constexpr std::optional<Epilogue> epilogue_of(UnaryOp op) {
  for (Epilogue e : epilogues) {
    if (e != Epilogue::none && epilogue_op(e) == op) return e;
  }
  return std::nullopt;
}

enum class ReduceOp : int { sum, mean, max, min };
const char* reduce_name(ReduceOp op);

enum class PoolKind : int { average, max };

// normal(mean a, std b), uniform [a, b), bernoulli (1 with probability a, written as 0/1),
// scaled_bernoulli (b with probability a, else 0; floating dtypes: dropout's mask with its scale
// 1 / (1 - p) in the one pass that draws it).
enum class RandomKind : int { normal, uniform, bernoulli, scaled_bernoulli };

}  // namespace tinyformer

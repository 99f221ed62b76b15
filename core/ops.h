// The primitive ops (generated from core/ops.def) and the kinds their parameters choose from.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

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

// Elementwise functions of one input. alpha is the exponent of pow_scalar.
enum class UnaryOp : int {
  neg,
  exp,
  log,
  sqrt,
  rsqrt,
  abs,
  tanh,
  sigmoid,
  relu,
  gelu,
  gelu_tanh,
  pow_scalar
};
const char* unary_name(UnaryOp op);

// Elementwise functions of two inputs; the comparisons produce booleans.
enum class BinaryOp : int { add, sub, mul, div, maximum, minimum, eq, ne, lt, le, gt, ge };
const char* binary_name(BinaryOp op);
inline bool is_comparison(BinaryOp op) {
  return op >= BinaryOp::eq;
}

enum class ReduceOp : int { sum, mean, max, min };
const char* reduce_name(ReduceOp op);

enum class PoolKind : int { average, max };

// normal(mean a, std b), uniform [a, b), bernoulli (1 with probability a, written as 0/1).
enum class RandomKind : int { normal, uniform, bernoulli };

}  // namespace tinyformer

// Parameter initialisers. Each overwrites a tensor in place (outside the graph) and draws from
// the given generator, or the default one.
#pragma once

#include "core/random.h"
#include "core/tensor.h"

namespace tinyformer::nn::init {

void zeros_(const Tensor& t);
void ones_(const Tensor& t);
void constant_(const Tensor& t, double value);
void uniform_(const Tensor& t, double low, double high, Generator* generator = nullptr);
void normal_(const Tensor& t, double mean, double std, Generator* generator = nullptr);
// fan_in = size(1) * (product of dims after 1), fan_out = size(0) * (same), as PyTorch computes.
void xavier_uniform_(const Tensor& t, double gain = 1.0, Generator* generator = nullptr);
void xavier_normal_(const Tensor& t, double gain = 1.0, Generator* generator = nullptr);
// PyTorch's default for Linear and Conv weights: kaiming_uniform_ with a = sqrt(5), which gives
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
void kaiming_uniform_(const Tensor& t, double a, Generator* generator = nullptr);

std::int64_t fan_in(const Tensor& t);
std::int64_t fan_out(const Tensor& t);

}  // namespace tinyformer::nn::init

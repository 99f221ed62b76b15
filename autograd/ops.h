// Every differentiable op of the autograd layer.
#pragma once

#include "autograd/attention.h"
#include "autograd/conv_pool.h"
#include "autograd/elementwise.h"
#include "autograd/embedding.h"
#include "autograd/grad_mode.h"
#include "autograd/linalg.h"
#include "autograd/linear.h"
#include "autograd/loss.h"
#include "autograd/normalization.h"
#include "autograd/reduce.h"
#include "autograd/shape_ops.h"

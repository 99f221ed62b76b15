// The public umbrella header: #include <tinyformer/tinyformer.h>.
#pragma once

#include "autograd/function.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "core/allocator.h"
#include "core/random.h"
#include "core/tensor.h"

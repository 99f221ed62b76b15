// Data utilities in one include: tokenizer, corpus loading, batching, masked LM, the resumable
// loader and the ListOps task.
#pragma once

#include "nn/batching.h"
#include "nn/data_rng.h"
#include "nn/listops.h"
#include "nn/listops_file.h"
#include "nn/loader.h"
#include "nn/mlm.h"
#include "nn/text_corpus.h"
#include "nn/tokenizer.h"

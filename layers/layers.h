// Every layer: include this to use tessera's nn::Module and the layers built on it.
#pragma once

#include "layers/attention.h"
#include "layers/block_sparse_conv.h"
#include "layers/block_sparse_linear.h"
#include "layers/dropout.h"
#include "layers/embedding.h"
#include "layers/layer_norm.h"
#include "layers/linear.h"
#include "layers/lstm.h"
#include "layers/module.h"
#include "layers/projection.h"
#include "layers/sparse_layer_norm.h"
#include "layers/transformer_block.h"

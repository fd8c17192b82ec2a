// Every op's public function. Include this (or <tessera/tessera.h>) to use tessera's ops.
#pragma once

#include "kernels/add/add.h"
#include "kernels/copy/copy.h"
#include "kernels/div/div.h"
#include "kernels/expand/expand.h"
#include "kernels/matmul/matmul.h"
#include "kernels/mul/mul.h"
#include "kernels/mul_scalar/mul_scalar.h"
#include "kernels/neg/neg.h"
#include "kernels/reshape/reshape.h"
#include "kernels/sub/sub.h"
#include "kernels/sum/sum.h"

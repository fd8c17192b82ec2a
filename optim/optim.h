// Every optimizer. Include this to use tessera's optimizers.
#pragma once

#include "optim/adamw.h"
#include "optim/optimizer.h"
#include "optim/sgd.h"

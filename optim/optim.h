// Every optimizer. Include this to use tessera's optimizers.
#pragma once

#include "optim/adafactor.h"
#include "optim/adam.h"
#include "optim/adamw.h"
#include "optim/clip_grad.h"
#include "optim/ema.h"
#include "optim/loss_scaler.h"
#include "optim/optimizer.h"
#include "optim/param_groups.h"
#include "optim/scaled_updater.h"
#include "optim/schedule.h"
#include "optim/sgd.h"
#include "optim/zero.h"

// The language models: each buildable from a JSON config (see each header for the fields).
#pragma once

#include "models/char_lstm_lm.h"
#include "models/config_reader.h"
#include "models/conv_lm.h"
#include "models/layout_report.h"
#include "models/model_checkpoint.h"
#include "models/model_registry.h"
#include "models/train/train.h"
#include "models/transformer_lm.h"

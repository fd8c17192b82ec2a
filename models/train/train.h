// The training loop as a library (namespace tessera::train): include this one header.
//   trainer.h          run_training, TrainOptions, TrainTask, TrainResult
//   window_task.h      WindowTask: a ready-made task over token windows (compiled or eager,
//                      micro-batches, mixed precision)
//   mixed_precision.h  bf16 / f16 autocast and the f16 loss scale
//   run_folder.h       the run folder's files (config.json, metrics.jsonl, TensorBoard, loss.svg)
//   stop_signal.h      SIGINT / SIGTERM: stop after the step with a checkpoint
#pragma once

#include "models/train/mixed_precision.h"
#include "models/train/run_folder.h"
#include "models/train/stop_signal.h"
#include "models/train/trainer.h"
#include "models/train/window_task.h"

// The language models: each buildable from a JSON config (see each header for the fields).
#pragma once

#include "models/config_reader.h"

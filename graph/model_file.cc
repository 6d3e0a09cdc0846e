// (being written)
#include "graph/model_file.h"

// (being written)
#include "graph/interpreter.h"

/* check.c — the one pair of check counters of a test program (check.h). */
#include "support/check.h"

atomic_int passed, failed;

/* stub.c — wf_backend_cuda() of a build without CUDA: NULL, so the
 * daemon asks for the backend without an #ifdef and reports "no CUDA". */
#include "backend.h"

#include <stddef.h>

const wf_backend_ops_t *wf_backend_cuda(void)
{
    return NULL;
}

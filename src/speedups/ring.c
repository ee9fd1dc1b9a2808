/* purelink._speedups: the link's queue() and its hand-off ring, its counters and the wake-once signal, and the link thread's take.
 *
 * (Not written yet: the module has none of this part's names, and
 * purelink.native reports the part as not compiled.)
 */
#include "speedups.h"

int
pl_ring_exec(PyObject *module)
{
    (void)module;
    return 0;
}

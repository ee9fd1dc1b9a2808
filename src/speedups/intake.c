/* purelink._speedups: the listener's fast intake: parse, dedup an in-order piece, complete and verify a batch.
 *
 * (Not written yet: the module has none of this part's names, and
 * purelink.native reports the part as not compiled.)
 */
#include "speedups.h"

int
pl_intake_exec(PyObject *module)
{
    (void)module;
    return 0;
}

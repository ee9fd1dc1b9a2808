/* purelink._speedups: the in-flight ledger: per-datagram stamps, the ACK walk and RACK's time-based loss check.
 *
 * (Not written yet: the module has none of this part's names, and
 * purelink.native reports the part as not compiled.)
 */
#include "speedups.h"

int
pl_ledger_exec(PyObject *module)
{
    (void)module;
    return 0;
}

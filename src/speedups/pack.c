/* purelink._speedups: packing records into batches and datagrams, straight into the send buffer.
 *
 * (Not written yet: the module has none of this part's names, and
 * purelink.native reports the part as not compiled.)
 */
#include "speedups.h"

int
pl_pack_exec(PyObject *module)
{
    (void)module;
    return 0;
}

/* purelink._speedups: the module, made of its parts (speedups.h).
 *
 * Why: one place that names the parts and builds the module from them, with
 * multi-phase initialisation (PEP 489) so the module keeps no global state.
 */
#include "speedups.h"

static PyModuleDef_Slot slots[] = {
    {Py_mod_exec, (void *)pl_crc32c_exec},
    {Py_mod_exec, (void *)pl_ring_exec},
    {Py_mod_exec, (void *)pl_pack_exec},
    {Py_mod_exec, (void *)pl_ledger_exec},
    {Py_mod_exec, (void *)pl_flights_exec},
    {Py_mod_exec, (void *)pl_intake_exec},
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "purelink._speedups",
    .m_doc = "purelink's compiled core: the per-record and per-datagram work in C "
             "(purelink.native says whether it is in use).",
    .m_size = 0,
    .m_slots = slots,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    return PyModuleDef_Init(&module_def);
}

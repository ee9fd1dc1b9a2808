/* purelink._speedups: a datagram in flight (packing.Flight), shared by the
 * packer (pack.c, which makes them) and the ledger (ledger.c, which stamps and
 * resolves them).
 *
 * Why a C type: one is made per datagram on the link thread's hot path, and
 * the Python policies (congestion control, path MTU, the sender) read it by
 * attribute, so it has exactly the attributes of the pure-Python Flight.  Its
 * `data` is always bytes (checked on every set), so a Flight refers to
 * nothing that could refer back to it: no cycle, no garbage collector.
 */
#ifndef PURELINK_FLIGHT_H
#define PURELINK_FLIGHT_H

#include "speedups.h"

typedef struct {
    PyObject_HEAD
    unsigned long long pn;
    unsigned long long first;
    unsigned long long last;
    Py_ssize_t size;
    Py_ssize_t offset;
    Py_ssize_t end;
    double sent;
    double delivered_time;
    double first_sent;
    long long delivered;
    PyObject *data; /* bytes, never NULL once made */
    char retx;
    char app_limited;
} PlFlight;

/* A new Flight of type `tp` (the module's Flight) with its fields set and a
 * new reference to `data` (bytes); NULL with an exception set. */
PyObject *pl_flight_new(PyTypeObject *tp, unsigned long long pn, unsigned long long first,
                        unsigned long long last, Py_ssize_t size, double sent, PyObject *data,
                        Py_ssize_t offset, Py_ssize_t end);

/* The module's Flight type (a new reference), or NULL with an exception set. */
PyTypeObject *pl_flight_type(PyObject *module);

/* The ledger's flights by packet number in a ring (flights.c: Flights). */
#define PL_PN_LIMIT (1ULL << 63) /* the packet numbers a ring holds are below this */
typedef struct PlFlights PlFlights;

/* `o` if it is a Flights, else NULL (no exception). */
PlFlights *pl_flights(PyObject *o);

/* Flights held. */
Py_ssize_t pl_flights_len(const PlFlights *r);

/* The flight of pn (borrowed), or NULL (no exception). */
PyObject *pl_flights_get(const PlFlights *r, unsigned long long pn);

/* Put f in as pn's (a new reference): pn (below PL_PN_LIMIT) above every one held, or one held
 * (replaced in its place); 0, or -1 with an exception (ValueError otherwise). */
int pl_flights_put(PlFlights *r, unsigned long long pn, PyObject *f);

/* Take pn's flight out (and let it go); 0, or -1 with KeyError. */
int pl_flights_del(PlFlights *r, unsigned long long pn);

/* The first flight at or after *pn, in packet number order: 1 with *pn its
 * pn and *f the flight (borrowed), or 0 at the end.  To walk them all: start
 * at 0 and go on from *pn + 1; nothing may change the ring meanwhile. */
int pl_flights_next(const PlFlights *r, unsigned long long *pn, PyObject **f);

#endif

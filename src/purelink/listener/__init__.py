"""The receiving side: `Listener`, its TCP side, the storage driver, backends, subscriptions.

A record's way in: the listener's loop (listener.py) drains its UDP socket and
its TCP connections (tcp.py), hands every datagram to the sans-IO listener
core (`purelink.protocol.listener_core`), and moves the core's batches through
the storage driver (storage.py) into a backend (backends/: a data directory or
a JetStream cluster); the answers go back the same way.  tail/ serves
subscriptions (`purelink.subscribe`) from the same store; config.py holds
what a listener is told (`ListenerConfig`), limits.py the bounds of its
limits, and stats.py what it counts.

Nothing is imported here: `purelink serve`'s argument checks read limits.py
without loading the listener (`purelink --version` and a bad flag stay
fast); `purelink.Listener` is the public name.
"""

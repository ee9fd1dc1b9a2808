"""The sans-IO core: wire format, sender and receiver state machines, windows.

Nothing in this package opens a socket, starts a thread or reads a clock: time
comes in as an argument, datagrams come in and go out as bytes.
"""

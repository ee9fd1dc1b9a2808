"""Subscriptions served by the listener over its TCP port (`purelink.subscribe`, `purelink tail`).

server.py takes requests, holds the slots and limits and hands each
subscription to a source (source.py: the reader interface; file.py reads a
data directory by sendfile, jetstream.py a JetStream stream); out.py writes
the reply, plain or sealed; hangups.py wakes a parked follower whose
subscriber left.
"""

"""The listener's backends: the storage driver's two kinds of store.

file.py writes a data directory (`purelink.store`), with group commit on a
sync thread; jetstream.py publishes to a NATS JetStream cluster
(`purelink.store.jetstream`).  Both implement `purelink.listener.storage.Backend`.
"""

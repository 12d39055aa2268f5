"""What the runtime offers, one service a module: queries, driving, starting, decisions, inbox,
control, expiry, sessions, batches, delivery. Each imports only the engine, the store, the
domain and services before it.
"""

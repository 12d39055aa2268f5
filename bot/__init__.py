"""The composition root: settings, wiring and the ``signoff`` command line.

Only this package builds concrete objects (the SQL store, the runtime, the agents named by
``SIGNOFF_APP``), and only inside functions that are called; importing it does no work.
"""

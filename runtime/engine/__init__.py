"""Driving a run: turns, tool dispatch, delegation, grants in effect, and the journal that
records events and notifications. Imports the domain and the store.
"""

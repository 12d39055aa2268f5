"""Pure values and rules: states, tickets, answers, constraints, tools, agents, models,
notifications. Imports nothing else of runtime.
"""

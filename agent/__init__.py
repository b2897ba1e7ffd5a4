"""The sqale-mcp agent: SQLite tools, the episode loop, model backends and the evaluation.

Nothing is imported here: every process of the product imports this package (the SQLite
worker processes too), so it stays free.
"""

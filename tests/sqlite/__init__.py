"""Tests of agent/sqlite: the guarded worker, hide rules, limits, files, SQL text."""

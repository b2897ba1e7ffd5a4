"""Tests of agent/evaluation: datasets, runs, scoring, summaries, the HTML report."""

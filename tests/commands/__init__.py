"""Tests of agent/commands: the sqale-agent command line."""

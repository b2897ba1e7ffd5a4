"""Tests of mcp_server/answer: the tool, its output and sizes, voting, asking, the view, verified
answers and saves."""

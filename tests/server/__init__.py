"""Tests of the MCP server (mcp_server/), grouped as its packages are."""

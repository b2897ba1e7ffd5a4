"""Tests of mcp_server/config: settings, the catalog, the options page."""

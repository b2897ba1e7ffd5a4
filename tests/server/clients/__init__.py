"""Tests of the MCP server as clients written by others see it: SDKs, the Inspector, mcp dev, the
conformance suite, both protocol eras."""

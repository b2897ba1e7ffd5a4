"""How sqale-mcp is distributed: the MCP Bundle's manifest and launcher, the MCP Registry entry."""

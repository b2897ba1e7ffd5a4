"""The test suite: one module per module of agent/ and mcp_server/, with shared support in tests.support."""

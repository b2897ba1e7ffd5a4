"""The MCP SDK's minimal server: what the stdio server's start-up is compared with, by
tests/project/test_startup.py (what it imports) and bench/bench_startup.py (how long it takes)."""

MINIMAL_SERVER = '''\
from mcp.server.mcpserver import MCPServer

server = MCPServer("minimal")


@server.tool()
def echo(text: str) -> str:
    """Say the text back."""
    return text


server.run()
'''

"""What the tests share: scripted model policies, fake model runtimes over HTTP, MCP helpers, databases."""

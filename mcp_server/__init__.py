"""The MCP server: one tool, answer_sql_question, in front of the local text-to-SQL agent."""

PROG = "sqale-mcp"  # the command (pyproject's script), as its --help and --version name it

"""The MCP server: one tool, answer_sql_question, in front of the local text-to-SQL agent."""

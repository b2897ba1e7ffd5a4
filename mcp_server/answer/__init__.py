"""The one tool, answer_sql_question: its arguments, samples, limits, errors and answer shapes."""

"""Tests of the project as a whole: code rules, imports, docs, the wheel, start-up."""

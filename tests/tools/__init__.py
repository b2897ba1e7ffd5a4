"""Tests of agent/tools: the model's eight tools and their texts."""

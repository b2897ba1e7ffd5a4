"""Tests of the agent's episode: the loop, prompt, replies, samples, choices, texts, traces."""

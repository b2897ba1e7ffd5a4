"""Tests of agent/backends and the engines: Ollama, OpenAI-compatible, slots, the engine session."""

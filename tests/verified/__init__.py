"""Tests of agent/verified and the golden files: the verified library, templates, proposals."""

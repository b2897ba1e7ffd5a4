"""The skip reason of a test needing an npm tool names each package once."""

from __future__ import annotations

from tests.support.node_tools import install_command


def test_the_install_command_names_each_package_once() -> None:
    """Node itself (`node@22`) is not named twice when it is the package asked for."""
    assert install_command("node@22") == "npm install --prefix .ci/node node@22"
    assert install_command("@anthropic-ai/mcpb@2.1.2") == (
        "npm install --prefix .ci/node node@22 @anthropic-ai/mcpb@2.1.2"
    )

"""The SDK's version, read by pyproject.toml and sent in Hello.sdk."""

__version__ = "0.1.0"

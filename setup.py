"""A thin shim for tools that look for setup.py; the metadata lives in pyproject.toml."""

from setuptools import setup

setup()

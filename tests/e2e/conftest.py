"""Fixtures of the end-to-end tests: Debian's chromium through playwright (tests/e2e/browser.py)."""

from tests.e2e.browser import chromium  # noqa: F401 - a fixture for the browser tests

"""Every test's fixtures and hooks live in helpers/fixtures.py (shared with tests/)."""

from helpers.fixtures import *  # noqa: F403 -- pytest reads hooks and fixtures from here

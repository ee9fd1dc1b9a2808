"""Every test's fixtures and hooks live in helpers/fixtures.py (bench/tests shares them)."""

from helpers.fixtures import *  # noqa: F403 -- pytest reads hooks and fixtures from here

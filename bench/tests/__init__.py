"""Tests of the benchmark programs themselves (bench/): smoke runs, the path emulator."""

"""Benchmarks: ``python -m benchmarks [NAME ...] [--quick]`` prints tables.

Each ``bench_<name>.py`` module exposes ``async def run(quick: bool) -> list[Table]``.
"""

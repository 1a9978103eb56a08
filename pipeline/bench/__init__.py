"""Benchmark harnesses behind ``pipeline bench ...`` and ``benchmarks/`` (driver side).

Each harness runs Feedline beside the baselines a user would pick instead, in one run, and
reports medians and ratios. No stage imports this package, and training does not need it.
"""

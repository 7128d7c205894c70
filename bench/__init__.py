"""Side-by-side benchmarks of Jobsite against its peers (arq, SAQ, RQ, Celery, Dramatiq, taskiq).

Run with `bin/bench`; see bench/run.py for the scenarios and docs/benchmarks.md for the results.
"""

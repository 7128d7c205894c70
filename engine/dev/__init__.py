"""Private Redis servers and clusters for tests and trials; failpoints for reliability tests."""

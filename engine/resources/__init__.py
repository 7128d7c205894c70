"""The client's resources: jobs, queues, dead letters and workers, each with all its Redis."""

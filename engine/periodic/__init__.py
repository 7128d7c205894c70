"""What runs on a clock: the scheduler, the cleaner, repeatables and their health."""

"""What operators read and command: metrics, gaps, why jobs wait, control, probes, drains, roles."""

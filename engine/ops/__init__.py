"""What operators read and command: metrics, waits explained, control, probes, drains, roles."""

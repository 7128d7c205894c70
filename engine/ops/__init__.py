"""What operators read and command beside the resources: metrics, gaps, control, probes."""

"""Admin (filled in below)."""

"""The dashboard: its pages, its websocket consumer and the Prometheus endpoint."""

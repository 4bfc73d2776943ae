"""What operators scrape: the plugin's metric families, defined once, built from the engine's records,
and written as Prometheus text."""

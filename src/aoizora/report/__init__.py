"""Human-facing output: tables, heatmaps, HTML reports."""

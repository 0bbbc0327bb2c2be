"""History: run listings, metric series and regression checks, plots, HTML, samples."""

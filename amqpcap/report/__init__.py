"""Writing results: summary.json, tables, plots, report.html and the console, from results in hand."""

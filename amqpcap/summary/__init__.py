"""What a capture and its analyzers' results come to, prepared once for every output: summary.json
(the capture's numbers, the settled findings, the overview and its verdict) and what the report
shows beside it (connection names, roles, the rates over time). The report is handed this."""

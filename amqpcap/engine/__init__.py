"""Running the analyzers: in this process, bucket by bucket on Dask, or over time slices."""

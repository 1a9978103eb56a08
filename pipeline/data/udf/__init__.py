"""What runs inside Ray Data's workers: the sample reader (an actor of the decode pool) with its
image and parquet readers, and the bad samples they skip, count and quarantine."""

"""Data sources: each plans a manifest of samples on the driver."""

from pipeline.data.sources.base import SourcePlan, skipped_fields, skipped_warning
from pipeline.data.sources.digits import plan_digits, write_digits
from pipeline.data.sources.image_folder import plan_image_folder
from pipeline.data.sources.parquet import plan_parquet

__all__ = [
    "SourcePlan",
    "plan_digits",
    "plan_image_folder",
    "plan_parquet",
    "skipped_fields",
    "skipped_warning",
    "write_digits",
]

"""Preprocessing: sources, decoding on Ray Data CPU workers, the split and the quarantine."""

from pipeline.data.config import DataConfig, DigitsSource, ImageFolderSource, ParquetSource
from pipeline.data.dataset import DataPlan, build_datasets, plan_source
from pipeline.data.reader import ReaderSpec, SampleReader, load_callable
from pipeline.data.split import validation_mask

__all__ = [
    "DataConfig",
    "DataPlan",
    "DigitsSource",
    "ImageFolderSource",
    "ParquetSource",
    "ReaderSpec",
    "SampleReader",
    "build_datasets",
    "load_callable",
    "plan_source",
    "validation_mask",
]

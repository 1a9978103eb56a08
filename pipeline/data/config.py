"""Config of the preprocessing stage: where samples come from, how Ray Data makes them rows."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pipeline.config.options import option, required
from pipeline.config.placement import PlacementConfig


@dataclass(frozen=True, kw_only=True)
class ImageFolderSource:
    """Images laid out as ROOT/<class name>/<file> (png or jpeg), the ImageFolder convention."""

    kind: Literal["image_folder"] = option("image_folder", "source kind")
    path: str = required("root directory whose sub-directories are the classes")


@dataclass(frozen=True, kw_only=True)
class DigitsSource:
    """scikit-learn's 1,797 handwritten digits, written once as 32x32 PNGs, read as a folder."""

    kind: Literal["digits"] = option("digits", "source kind")
    cache_dir: str = option("~/.cache/feedline/digits", "where the PNG files are written once")


@dataclass(frozen=True, kw_only=True)
class ParquetSource:
    """Parquet files whose columns become tensors (token ids, features)."""

    kind: Literal["parquet"] = option("parquet", "source kind")
    path: str = required("a parquet file or a directory of them")
    features: tuple[str, ...] = option((), "columns stacked into the float32 'features' tensor; "
                                           "empty means every column but the label and id")
    label_column: str = option("label", "integer class column")
    id_column: str = option("", "column with stable integer ids; empty assigns file/row ids")


@dataclass(frozen=True, kw_only=True)
class RaySource:
    """A Ray Dataset your code builds (any ``ray.data.read_*``, your own ``map_batches``): rows
    of numeric columns, each of one shape. Rows without an ``id`` column get their position in
    the dataset's order as id (:mod:`pipeline.data.sources.ray_dataset` says what that keeps)."""

    kind: Literal["ray"] = option("ray", "source kind")
    function: str = option("", "'module:function' called on the driver (with args) that returns "
                               "a ray.data.Dataset, split by val_fraction, or "
                               "{'train': Dataset, 'val': Dataset}; empty: the datasets given "
                               "to pipeline.run(datasets=...)")
    args: Any = option(None, "keyword arguments of the function (a mapping)")
    input: str = option("", "the column the model reads (its per-row shape is the task's "
                            "input_shape); empty: 'image', else 'features', else the first "
                            "column other than 'label' and 'id'")


Source = ImageFolderSource | DigitsSource | ParquetSource | RaySource


@dataclass(frozen=True, kw_only=True)
class AugmentConfig:
    """Per-sample random flips and crops of training images (never validation)."""

    hflip: float = option(0.0, "probability of a horizontal flip", ge=0, le=1)
    crop_padding: int = option(0, "random crop after padding each side by this many pixels "
                                  "with the mean (a shift of up to ± that many)", ge=0)

    @property
    def enabled(self) -> bool:
        return self.hflip > 0 or self.crop_padding > 0


@dataclass(frozen=True, kw_only=True)
class DataConfig:
    """The preprocessing stage: a source, decoding on Ray Data CPU workers, and the split."""

    source: Source = field(default_factory=DigitsSource,
                           metadata={"doc": "where samples come from"})
    image_size: tuple[int, int] = option((32, 32), "decoded images are resized to (height, width)",
                                         ge=1)
    channels: int = option(1, "1 (grayscale) or 3 (RGB); 16-bit images are scaled to 8 bits "
                              "and transparent pixels composited on black", ge=1, le=3)
    mean: tuple[float, ...] = option((0.5,), "per-channel mean subtracted after scaling to [0, 1]")
    std: tuple[float, ...] = option((0.5,), "per-channel std divided after subtracting the mean",
                                    gt=0)
    transform: str = option("", "optional 'module:function' applied to each decoded batch "
                                "(dict of numpy arrays in, same out) inside Ray Data workers")
    augment: AugmentConfig = field(default_factory=AugmentConfig, metadata={
        "doc": "random flips/crops of training images on the device, seeded by (seed, epoch, id)"})
    shuffle_buffer: int = option(0, "rows each trainer also shuffles in a sliding window "
                                    "while an epoch streams, reseeded every epoch from (seed, "
                                    "epoch, rank); every epoch is a fresh permutation across "
                                    "the ranks without it", ge=0)
    reshuffle: Literal["global", "node", "rank"] = option(
        "global", "which ranks' cached rows every replayed epoch deals anew: 'global' all of "
                  "them, as DistributedSampler(shuffle=True) does (ranks on several machines "
                  "then stream every epoch instead of caching: a cached row would cross the "
                  "network every epoch); 'node' the ranks of each machine (rows never leave "
                  "it); 'rank' each rank its own rows, reordered")
    val_fraction: float = option(0.2, "share of samples held out for validation", ge=0, lt=1)
    seed: int = option(0, "seed of the split and of any augmentation")
    concurrency: tuple[int, int] = option((1, 2), "[min, max] decode tasks at once (autoscaled)",
                                          ge=1)
    autoscale: bool = option(True, "size the decode pool within concurrency by the trainers' "
                                   "data wait (while they wait and the actors are busy, grow "
                                   "to the tasks their measured pace needs at a task's "
                                   "measured rate; after an epoch nobody waited in, shrink "
                                   "to what its decoding needed), and ask Ray's autoscaler for "
                                   "preprocessing nodes when the pool outgrows them; false "
                                   "leaves it to Ray Data, up to concurrency's max")
    autoscale_cooldown_s: float = option(10.0, "seconds between two pool changes (a new "
                                               "decoding process takes seconds to start)", gt=0)
    cpus_per_actor: float = option(1.0, "CPUs each decode task reserves", gt=0)
    placement: PlacementConfig = field(default_factory=PlacementConfig, metadata={
        "doc": "nodes the decode tasks run on (CPU nodes)"})
    decode_batch_size: int = option(64, "rows per decode batch of the decode tasks (Ray Data "
                                        "map_batches); the training batch is "
                                        "train.batch_size", ge=1)
    cache: bool | Literal["auto", "memory", "disk", "off"] = option(
        "auto", "decoded-sample cache: 'memory' or 'disk' keep each trainer's decoded samples "
                "from the first epoch and replay them in later epochs (no decoding, no pipeline "
                "restart); 'auto' picks memory when a rank's shard fits cache_memory_fraction, "
                "else disk, else off; 'off' (or false) decodes every epoch")
    cache_memory_fraction: float = option(0.25, "share of the node's available memory the "
                                                "trainers on it may use for the memory cache",
                                          gt=0, le=1)
    cache_dir: str = option("", "local directory of the disk cache; empty means the system's "
                                "temporary directory")
    max_bad_fraction: float = option(0.05, "stop the run when more than this share of samples "
                                           "fail to decode", ge=0, le=1)
    max_consecutive_bad: int = option(20, "stop the run after this many bad samples in a row "
                                          "(a broken mount, not a few bad files)", ge=1)
    sample_timeout_s: float = option(10.0, "a sample whose read and decode takes longer is "
                                           "quarantined as 'timeout', even while its read is "
                                           "still stuck (a stale mount)", gt=0)
    max_image_pixels: int = option(89_478_485, "images whose header declares more pixels "
                                               "(width x height) are quarantined as 'too_large' "
                                               "before decoding; the default is Pillow's own "
                                               "limit (Image.MAX_IMAGE_PIXELS)", ge=1)

    @property
    def ours(self) -> bool:
        """Whether the decode actors are Feedline's (their pulses feed the pool controller);
        a ``ray`` source's pools are the user's."""
        return not isinstance(self.source, RaySource)

    @property
    def elastic(self) -> bool:
        """Whether the controller sizes the pool: ``autoscale`` on, a range to size within, and
        Feedline's own decode actors (a ``ray`` source's pools are the user's)."""
        low, high = self.concurrency
        return self.autoscale and low < high and self.ours

    @property
    def cache_mode(self) -> str:
        """``cache`` as a word: YAML reads a bare ``off`` as false, ``on`` as true (auto)."""
        if isinstance(self.cache, bool):
            return "auto" if self.cache else "off"
        return self.cache

    def channel_stats(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """``(mean, std)`` with one value per channel (a single value applies to every one)."""
        return (self.mean * (self.channels // len(self.mean)),
                self.std * (self.channels // len(self.std)))

    def check(self) -> list[str]:
        errors = []
        if self.channels not in (1, 3):
            errors.append(f"channels ({self.channels}) must be 1 or 3")
        for name in ("mean", "std"):
            values = getattr(self, name)
            if len(values) not in (1, self.channels):
                errors.append(f"{name} ({list(values)}) needs 1 or {self.channels} values, one per "
                              f"channel")
        if self.augment.enabled and isinstance(self.source, (ParquetSource, RaySource)):
            errors.append(f"augment flips and crops the images Feedline decodes; the "
                          f"{self.source.kind} source's rows are yours: remove data.augment "
                          f"(augment in your own map_batches or task)")
        if isinstance(self.source, RaySource) and not isinstance(self.source.args,
                                                                 (dict, type(None))):
            errors.append(f"source.args ({self.source.args!r}) must be a mapping of keyword "
                          f"arguments for source.function")
        low, high = self.concurrency
        if low > high:
            errors.append(f"concurrency ({[low, high]}) must be [min, max] with min <= max")
        return errors

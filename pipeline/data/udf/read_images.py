"""Reading and decoding image files for :class:`~pipeline.data.udf.reader.SampleReader`.

Image files are read on a helper thread with a deadline (``data.sample_timeout_s``), so a read
that never returns (a stale network mount) is quarantined as ``timeout`` while it is still
stuck; a FIFO or device, whose open() could block forever, is refused from its ``os.stat``::

    actor thread:  path ─► jobs ─► wait(deadline) ─► image | quarantine(timeout)
    read thread:          jobs ─► stat, read, decode ─► its own reply box

Python cannot interrupt a read stuck in the kernel: its thread is abandoned (a daemon, holding
its file descriptor until the read returns or the actor exits) and a fresh one takes the next
sample. Storage where every read hangs stops the run through ``data.max_consecutive_bad``
before such threads pile up.
"""

from __future__ import annotations

import io
import logging
import math
import os
import queue
import stat
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.data.udf.bad_samples import BadSample

if TYPE_CHECKING:
    from pipeline.data.udf.reader import Batch

logger = logging.getLogger(__name__)


class ReadThread:
    """Runs one read at a time off the actor's thread, so the actor can give up on it.

    Lives inside a Ray Data actor and is made there, on first use (threads do not pickle). Each
    call gets its own reply box: a read that returns after its deadline answers into a box
    nobody waits on, so a sample is either delivered or quarantined, never both.
    """

    def __init__(self):
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="feedline-read", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                fn, arg, reply = self._jobs.get(timeout=1.0)
            except queue.Empty:
                continue
            try:
                reply.put((True, fn(arg)))
            except Exception as exc:  # re-raised on the actor's thread by call()
                reply.put((False, exc))

    def call(self, fn: Callable[[Any], Any], arg: Any, timeout: float) -> Any:
        """``fn(arg)`` on the read thread; ``TimeoutError`` when it has not returned in time."""
        reply: queue.SimpleQueue = queue.SimpleQueue()
        self._jobs.put((fn, arg, reply))
        try:
            ok, value = reply.get(timeout=None if math.isinf(timeout) else timeout)
        except queue.Empty:
            raise TimeoutError from None
        if not ok:
            raise value
        return value

    def abandon(self) -> None:
        """Leave a stuck thread behind: it exits if its read ever returns."""
        self._stop.set()


SPECIAL_FILES = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                 (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                 (stat.S_ISDIR, "a directory"))


def to_eight_bit(img: Any, mode: str) -> Any:
    """A Pillow image as 8-bit ``mode`` ("L" or "RGB"), by the documented rules:

    - 16-bit greyscale (``I;16*``, and ``I`` holding 16-bit values) is scaled by 255/65535;
      Pillow's own conversion clips at 255 and turns it nearly white.
    - Transparency (RGBA, LA, PA, or a P/L/RGB image with a transparent colour) is composited
      on black: a transparent pixel is black whatever colour it hides.
    """
    from PIL import Image

    if img.mode in ("I", "I;16", "I;16B", "I;16L", "I;16N"):
        pixels = np.clip(np.asarray(img), 0, 65535).astype(np.uint32)
        img = Image.fromarray(((pixels + 128) // 257).astype(np.uint8), "L")
    elif img.has_transparency_data:
        rgba = img.convert("RGBA")
        img = Image.alpha_composite(Image.new("RGBA", rgba.size, (0, 0, 0, 255)), rgba)
    return img.convert(mode)


class ImageReading:
    """Mixin of :class:`~pipeline.data.udf.reader.SampleReader`: its image path (``spec.kind ==
    "image"``), on the reader's ``spec``, ``_mean``/``_std``, read thread and ``_record``."""

    # -- images ---------------------------------------------------------------------------

    def _decode(self, path: str) -> np.ndarray:
        """Runs on the read thread; raises for a bad file."""
        from PIL import Image

        mode = os.stat(path).st_mode  # before open(): opening a FIFO blocks until a writer comes
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in SPECIAL_FILES if test(mode)), "a special file")
            raise BadSample("not_a_regular_file", f"{kind}, not a regular file; only image "
                                                  f"files are read")
        with open(path, "rb") as fh:
            raw = fh.read()
        if not raw:
            raise ValueError("empty file (0 bytes)")
        limit = self.spec.max_image_pixels
        try:
            img = Image.open(io.BytesIO(raw))  # reads the header only
        except Image.DecompressionBombError as exc:  # beyond twice Pillow's own limit
            raise BadSample("too_large", f"its header declares more pixels than "
                                         f"data.max_image_pixels ({limit:,}) (Pillow: {exc}); "
                                         f"refused before decoding") from None
        with img:
            width, height = img.size
            if width * height > limit:
                raise BadSample("too_large", f"{width}x{height} = {width * height:,} pixels "
                                             f"(from its header) > data.max_image_pixels "
                                             f"({limit:,}); refused before decoding")
            img = to_eight_bit(img, "L" if self.spec.channels == 1 else "RGB")
            height, width = self.spec.image_size
            if img.size != (width, height):
                img = img.resize((width, height), Image.Resampling.BILINEAR)
            pixels = np.asarray(img, dtype=np.uint8)
        return pixels[None] if pixels.ndim == 2 else pixels.transpose(2, 0, 1)

    def _read(self, path: str) -> np.ndarray:
        """Decode ``path`` on the read thread within ``data.sample_timeout_s``."""
        if self._thread is None:
            from PIL import Image

            if Image.MAX_IMAGE_PIXELS and self.spec.max_image_pixels > Image.MAX_IMAGE_PIXELS:
                # Pillow refuses at twice its own limit: it must not undercut a higher one
                Image.MAX_IMAGE_PIXELS = self.spec.max_image_pixels
            self._thread = ReadThread()
        try:
            return self._thread.call(self._decode, path, self.spec.sample_timeout_s)
        except TimeoutError:
            self._thread.abandon()
            self._thread = ReadThread()
            self.abandoned += 1
            logger.warning("a read of %s has not returned after %g s; its thread is abandoned "
                           "(%d so far in this actor)", path, self.spec.sample_timeout_s,
                           self.abandoned)
            raise BadSample("timeout", f"read and decode did not finish within "
                                       f"data.sample_timeout_s ({self.spec.sample_timeout_s:g} s)"
                            ) from None

    def _images(self, batch: Batch) -> tuple[Batch, list[dict[str, Any]]]:
        good, images, bad = [], [], []
        for i, path in enumerate(batch["path"]):
            try:
                image = self._read(str(path))
            except Exception as exc:  # noqa: BLE001 - any failure is this file's, not the block's
                bad.append(self._record(int(batch["id"][i]), str(path), "decode", exc))
                continue
            images.append(image)
            good.append(i)
            self.consecutive_bad = 0
        channels, (height, width) = self.spec.channels, self.spec.image_size
        stacked = (np.stack(images) if images
                   else np.empty((0, channels, height, width), np.uint8))
        if not self.spec.ship_uint8:
            stacked = (stacked.astype(np.float32) / 255.0 - self._mean) / self._std
        index = np.asarray(good, dtype=np.int64)
        return {"id": batch["id"][index], "label": batch["label"][index], "image": stacked}, bad
